// One decoder layer in one call: engines/lean.py's Block.forward_native, op for op and in its
// order (the same products and row ops, the same ATen attention), for batch 1 without biases:
// its numbers are forward_native's bit for bit, without the Python between the ops
// (tests/test_engines.py compares the two).
#pragma once

#include <torch/extension.h>

#include <vector>

#include "linear.h"
#include "rowops.h"

namespace specsweep {

// A projection's tensors: {nib, scale, offset} for q4 blocks, {q, scale} for q8.
inline torch::Tensor project(const torch::Tensor& x, const std::vector<torch::Tensor>& w,
                             Family family) {
  return w.size() == 3 ? q4_linear(x, w[0], w[1], w[2], family) : q8_linear(x, w[0], w[1], family);
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
  auto q = qkv.slice(1, 0, nh * hd).view({1, n, nh, hd}).transpose(1, 2);
  auto o = at::scaled_dot_product_attention(q, kc.slice(2, 0, start + n),
                                            vc.slice(2, 0, start + n), mask, 0.0, false,
                                            c10::nullopt, nh != nkv);
  auto h = add_rms_norm_(x, project(o.transpose(1, 2).reshape({n, nh * hd}), wo, family),
                         norm_post, eps);
  auto gu = project(h, wgu, family).chunk(2, -1);
  x.add_(project(at::silu(gu[0]) * gu[1], wd, family));
}

}  // namespace specsweep
