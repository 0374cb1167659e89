// One decoder layer in one call: engines/lean.py's Block.forward_native, op for op and in its
// order (the same products, row ops and attention.h's attention), for batch 1 without biases:
// its numbers are forward_native's bit for bit, without the Python between the ops
// (tests/test_engines.py compares the two). attend_mlp_ is the layer after its input norm, which
// the EAGLE heads run on inputs of their own (drafters/eagle_native.py).
#pragma once

#include <torch/extension.h>

#include <cstring>
#include <vector>

#include "attention.h"
#include "linear.h"
#include "rowops.h"

namespace specsweep {

// A projection's tensors: {nib, scale, offset} for q4 blocks, {q, scale} for q8, {packed, N}
// for repacked weights (q8a's or bf16's; N a one-element int64 tensor: the output rows).
inline torch::Tensor project(const torch::Tensor& x, const std::vector<torch::Tensor>& w,
                             Family family) {
  if (w.size() == 3) return q4_linear(x, w[0], w[1], w[2], family);
  if (w[0].dim() == 3) {  // the row count read in place: item() is a dispatch, 4 a layer
    TORCH_CHECK(w[1].scalar_type() == torch::kInt64 && w[1].numel() == 1,
                "project: repacked weights carry their row count as one int64");
    return repacked_linear(x, w[0], *w[1].data_ptr<int64_t>());
  }
  return q8_linear(x, w[0], w[1], family);
}

// Several sequences (attention_seqs' rows, caches, starts and masks): each writes its new keys
// and values at its own slots of its own cache, and attends to that cache only; the
// products run over all rows at once (a row's numbers are the same alone: contract.h).
inline void write_cache(const std::vector<torch::Tensor>& caches, const torch::Tensor& part,
                        const std::vector<int64_t>& rows, const std::vector<int64_t>& starts,
                        int64_t nkv, int64_t hd) {
  // a float32 cache takes its rows by plain copies (torch's slice, view, transpose and copy_
  // cost ~7 µs a call in dispatch, ~0.4 ms a step over the layers); bfloat16 keeps torch's
  // rounding
  const bool plain = caches[0].scalar_type() == torch::kFloat32 && part.stride(1) == 1;
  for (size_t b = 0; b < starts.size(); ++b) {
    const int64_t n = rows[b + 1] - rows[b];
    if (!plain || !caches[b].is_contiguous()) {
      caches[b].slice(1, starts[b], starts[b] + n).copy_(
          part.slice(0, rows[b], rows[b + 1]).view({n, nkv, hd}).transpose(0, 1));
      continue;
    }
    const int64_t cap = caches[b].size(1), stride = part.stride(0);
    const float* src = part.data_ptr<float>();
    float* dst = caches[b].data_ptr<float>();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t h = 0; h < nkv; ++h)
        std::memcpy(dst + (h * cap + starts[b] + i) * hd, src + (rows[b] + i) * stride + h * hd,
                    sizeof(float) * hd);
  }
}

// q, k and v of every row (N, (nh + 2 nkv) hd), rotary applied, each sequence's keys and values
// written into its own cache slots.
inline torch::Tensor qkv_into_cache(const torch::Tensor& a, const std::vector<torch::Tensor>& wqkv,
                                    const std::vector<torch::Tensor>& kcs,
                                    const std::vector<torch::Tensor>& vcs,
                                    const std::vector<int64_t>& rows,
                                    const std::vector<int64_t>& starts, torch::Tensor cos,
                                    torch::Tensor sin, int64_t nh, int64_t nkv, int64_t hd,
                                    Family family) {
  auto qkv = project(a, wqkv, family);
  rope_(qkv, nh + nkv, hd, cos, sin);
  write_cache(kcs, qkv.slice(1, nh * hd, (nh + nkv) * hd), rows, starts, nkv, hd);
  write_cache(vcs, qkv.slice(1, (nh + nkv) * hd), rows, starts, nkv, hd);
  return qkv;
}

// The rest of the layer after attention's output o (rows of x): the output projection into the
// residual stream x (updated in place), the post-attention norm and the MLP.
inline void after_attention_(torch::Tensor x, const torch::Tensor& o, torch::Tensor norm_post,
                             const std::vector<torch::Tensor>& wo,
                             const std::vector<torch::Tensor>& wgu,
                             const std::vector<torch::Tensor>& wd, double eps, Family family) {
  auto h = add_rms_norm_(x, project(o, wo, family), norm_post, eps);
  auto g = silu_mul(project(h, wgu, family));
  add_(x, project(g, wd, family));
}

// The layer after its input norm: x (N, H) the residual stream of every sequence's rows,
// updated in place; a (N, A) what q, k and v read (the normed stream, or a drafter's own input:
// an EAGLE head's fused features, A = H or 2H); kcs[b], vcs[b] (kv, cap_b, hd) sequence b's
// cache of this layer;
// cos, sin (N, hd) each row's rotary at its position; every projection in `family`.
inline void attend_mlp_seqs_(torch::Tensor x, const torch::Tensor& a, torch::Tensor norm_post,
                             const std::vector<torch::Tensor>& wqkv,
                             const std::vector<torch::Tensor>& wo,
                             const std::vector<torch::Tensor>& wgu,
                             const std::vector<torch::Tensor>& wd,
                             const std::vector<torch::Tensor>& kcs,
                             const std::vector<torch::Tensor>& vcs,
                             const std::vector<int64_t>& rows,
                             const std::vector<int64_t>& starts,
                             const std::vector<torch::Tensor>& masks, torch::Tensor cos,
                             torch::Tensor sin, int64_t nh, int64_t nkv, int64_t hd, double eps,
                             Family family) {
  auto qkv = qkv_into_cache(a, wqkv, kcs, vcs, rows, starts, cos, sin, nh, nkv, hd, family);
  auto o = attention_seqs(qkv, kcs, vcs, rows, starts, masks, nh, nkv, hd);
  after_attention_(x, o, norm_post, wo, wgu, wd, eps, family);
}

// One sequence: kc, vc (1, kv, cap, hd), positions [start, start + n) written; mask
// (1, 1, n, start + n) or none (causal). keep: only the last `keep` rows go on past the cache
// write (attention, the output projection, the MLP; 0: every row), the earlier rows of x left as
// they came: a drafter catching up on several positions needs their keys and values, and the
// last row's output only. A kept row's numbers are the same as with every row (contract.h).
inline void attend_mlp_(torch::Tensor x, const torch::Tensor& a, torch::Tensor norm_post,
                        const std::vector<torch::Tensor>& wqkv, const std::vector<torch::Tensor>& wo,
                        const std::vector<torch::Tensor>& wgu, const std::vector<torch::Tensor>& wd,
                        torch::Tensor kc, torch::Tensor vc, int64_t start, torch::Tensor cos,
                        torch::Tensor sin, c10::optional<torch::Tensor> mask, int64_t nh,
                        int64_t nkv, int64_t hd, double eps, Family family, int64_t keep) {
  const int64_t n = x.size(0), first = keep <= 0 || keep >= n ? 0 : n - keep;
  const std::vector<torch::Tensor> kcs{kc.select(0, 0)}, vcs{vc.select(0, 0)};
  auto qkv = qkv_into_cache(a, wqkv, kcs, vcs, {0, n}, {start}, cos, sin, nh, nkv, hd, family);
  auto m = mask.has_value() ? *mask : torch::Tensor();
  if (first && m.defined() && m.numel()) m = m.reshape({n, start + n}).slice(0, first);
  auto o = attention_seqs(qkv.slice(0, first), kcs, vcs, {0, n - first}, {start + first}, {m},
                          nh, nkv, hd);
  after_attention_(x.slice(0, first), o, norm_post, wo, wgu, wd, eps, family);
}

// One decoder layer: its input norm, then attend_mlp_ on the normed stream.
inline void layer_(torch::Tensor x, torch::Tensor norm_in, torch::Tensor norm_post,
                   std::vector<torch::Tensor> wqkv, std::vector<torch::Tensor> wo,
                   std::vector<torch::Tensor> wgu, std::vector<torch::Tensor> wd,
                   torch::Tensor kc, torch::Tensor vc, int64_t start, torch::Tensor cos,
                   torch::Tensor sin, c10::optional<torch::Tensor> mask, int64_t nh, int64_t nkv,
                   int64_t hd, double eps, Family family) {
  attend_mlp_(x, rms_norm(x, norm_in, eps), norm_post, wqkv, wo, wgu, wd, kc, vc, start, cos, sin,
              mask, nh, nkv, hd, eps, family, 0);
}

}  // namespace specsweep
