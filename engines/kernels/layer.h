// One decoder layer in one call: engines/lean.py's Block.forward_native, op for op and in its
// order (the same products, row ops and attention.h's attention), for batch 1 without biases:
// its numbers are forward_native's bit for bit, without the Python between the ops
// (tests/test_engines.py compares the two).
#pragma once

#include <torch/extension.h>

#include <vector>

#include "attention.h"
#include "linear.h"
#include "rowops.h"

namespace specsweep {

// A projection's tensors: {nib, scale, offset} for q4 blocks, {q, scale} for q8, {packed, N}
// for q8a's repacked weights (N a one-element int64 tensor: the output rows).
inline torch::Tensor project(const torch::Tensor& x, const std::vector<torch::Tensor>& w,
                             Family family) {
  if (w.size() == 3) return q4_linear(x, w[0], w[1], w[2], family);
  if (w[0].dim() == 3) return packed_linear(x, w[0], w[1].item<int64_t>());
  return q8_linear(x, w[0], w[1], family);
}

// x (n, H) the residual stream, updated in place; kc, vc (1, kv, cap, hd) this layer's cache,
// positions [start, start + n) written; cos, sin (n, hd); mask (1, 1, n, start + n) or none;
// every projection in `family`.
inline void layer_(torch::Tensor x, torch::Tensor norm_in, torch::Tensor norm_post,
                   std::vector<torch::Tensor> wqkv, std::vector<torch::Tensor> wo,
                   std::vector<torch::Tensor> wgu, std::vector<torch::Tensor> wd,
                   torch::Tensor kc, torch::Tensor vc, int64_t start, torch::Tensor cos,
                   torch::Tensor sin, c10::optional<torch::Tensor> mask, int64_t nh, int64_t nkv,
                   int64_t hd, double eps, Family family) {
  const int64_t n = x.size(0);
  auto qkv = project(rms_norm(x, norm_in, eps), wqkv, family);  // (n, (nh + 2 nkv) hd)
  rope_(qkv, nh + nkv, hd, cos, sin);
  kc.select(0, 0).slice(1, start, start + n).copy_(
      qkv.slice(1, nh * hd, (nh + nkv) * hd).view({n, nkv, hd}).transpose(0, 1));
  vc.select(0, 0).slice(1, start, start + n).copy_(
      qkv.slice(1, (nh + nkv) * hd).view({n, nkv, hd}).transpose(0, 1));
  auto o = attention(qkv, kc.select(0, 0), vc.select(0, 0), start, mask, nh, nkv, hd);
  auto h = add_rms_norm_(x, project(o, wo, family), norm_post, eps);
  auto a = silu_mul(project(h, wgu, family));
  x.add_(project(a, wd, family));
}

}  // namespace specsweep
