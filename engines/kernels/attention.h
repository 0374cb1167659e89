// Decode attention over the cache, and the MLP's SiLU·mul: one row at a time, in an order that
// depends on nothing but the row (contract.h's promise, kept here for the ops between the
// products). A query row attends to its visible keys (the mask's row, or causally every key up
// to its own slot) in slot order, which is position order (a tree's nodes come after their
// ancestors): its scores by the ISA's `dot` arithmetic (dot_parts, then finish's tree, eight
// keys at a time by finish8), their maximum, each key's weight exp(s − max) by
// `vexp` (one sequence of fmas on every build, lane by lane, so the grouping of keys in vectors
// changes nothing), the weights' sum key by key, and the output as one fma per key over the
// head's values, divided by the sum at the end. Neither the cache slots of masked keys nor the
// number of query rows enters a row's numbers: a row alone or among 64 tree nodes gives the
// same bits. For speed, the heads of one row that share a KV head (they see the same keys) go
// side by side, each value row loaded once for them all; a thread takes (row, KV head) units.
// The cache holds float32 or bfloat16 (`model.kv_dtype`): a bfloat16 key or value is widened to
// float32 exactly as it is loaded, and everything after is the float32 arithmetic above, so a
// row's bits are still the same alone or among others, on every build.
#pragma once

#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "isa.h"

namespace specsweep {

// e^x lane by lane for x in [-87, 88] (clamped there): x = n·ln2 + r, e^r by a degree-7
// polynomial (Cephes' expf coefficients), 2^n through the exponent field. Relative error a few
// 1e-7; the same bits on every build (only +, ·, fma, rounding to nearest).
inline Vec vexp(Vec x) {
  x = vclamp(x, -87.0f, 88.0f);
  const Vec n = vround(vmul(x, vset(1.44269504088896341f)));
  Vec r = vfma(n, vset(-0.693359375f), x);
  r = vfma(n, vset(2.12194440e-4f), r);
  Vec p = vset(1.9875691500e-4f);
  p = vfma(p, r, vset(1.3981999507e-3f));
  p = vfma(p, r, vset(8.3334519073e-3f));
  p = vfma(p, r, vset(4.1665795894e-2f));
  p = vfma(p, r, vset(1.6666665459e-1f));
  p = vfma(p, r, vset(5.0000001201e-1f));
  p = vfma(p, vmul(r, r), r);
  p = vadd(p, vset(1.0f));
  return vmul(p, vpow2(n));
}

constexpr int64_t MAX_HD = 256;  // the widest head attention() takes

// G heads of one query row that share a KV head, hence its visible keys (their slots in `at`):
// each head's scores (dot · scale, eight keys' dots finished at once by finish8: per key the
// tree dot uses), their maximum, e^(s − max), the weights' sum key by key, and the output as
// one fma chain per lane over the keys' values, divided by the sum. The heads go side by side
// (their chains independent, each value row loaded once for all G): a head's numbers are the
// same alone. s: G rows of `stride` floats; lanes past the count are computed, unused.
template <int G, int W, typename T>
inline void attend_heads(const float* const q[G], const T* k, const T* v,
                         const std::vector<int64_t>& at, int64_t hd, float scale, float* s,
                         int64_t stride, float* const out[G]) {
  const int64_t c = static_cast<int64_t>(at.size());
  float mx[G], sum[G];
  for (int g = 0; g < G; ++g) {
    float* sg = s + g * stride;
    for (int64_t j = 0; j < c; j += 8) {
      Vec a0[8], a1[8];
      for (int u = 0; u < 8; ++u) dot_parts(q[g], k + at[std::min(j + u, c - 1)] * hd, hd, a0[u], a1[u]);
      vstore(sg + j, vmul(finish8(a0, a1), vset(scale)));
    }
    mx[g] = -std::numeric_limits<float>::infinity();
  }
  for (int64_t j = 0; j < c; ++j)
    for (int g = 0; g < G; ++g) mx[g] = std::max(mx[g], s[g * stride + j]);
  for (int g = 0; g < G; ++g) {
    float* sg = s + g * stride;
    for (int64_t j = 0; j < c; j += 8) vstore(sg + j, vexp(vadd(vload(sg + j), vset(-mx[g]))));
    sum[g] = 0.0f;
  }
  for (int64_t j = 0; j < c; ++j)
    for (int g = 0; g < G; ++g) sum[g] += s[g * stride + j];
  const int64_t w = W > 0 ? W : hd / 8;  // W: the head's width in vectors, when known
  Vec o[G][W > 0 ? W : MAX_HD / 8];
  for (int g = 0; g < G; ++g)
    for (int64_t d = 0; d < w; ++d) o[g][d] = vzero();
  for (int64_t j = 0; j < c; ++j) {
    Vec p[G];
    for (int g = 0; g < G; ++g) p[g] = vset(s[g * stride + j]);
    const T* vj = v + at[j] * hd;
    for (int64_t d = 0; d < w; ++d) {
      const Vec x = vload(vj + 8 * d);
      for (int g = 0; g < G; ++g) o[g][d] = vfma(p[g], x, o[g][d]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int64_t d = 0; d < w; ++d) vstore(out[g] + 8 * d, vdiv(o[g][d], vset(sum[g])));
}

// As many heads side by side as the registers hold their accumulators (hd = 64: three where
// the build has 32 vector registers), the rest one by one.
template <typename T>
inline void attend_group(const float* const* q, int64_t heads, const T* k, const T* v,
                         const std::vector<int64_t>& at, int64_t hd, float scale, float* s,
                         int64_t stride, float* const* out) {
  constexpr bool wide = SPECSWEEP_VEC_REGS >= 32;
  int64_t h = 0;
  if (hd == 64 && wide) {
    for (; h + 3 <= heads; h += 3) attend_heads<3, 8, T>(q + h, k, v, at, hd, scale, s, stride, out + h);
    for (; h + 2 <= heads; h += 2) attend_heads<2, 8, T>(q + h, k, v, at, hd, scale, s, stride, out + h);
  }
  for (; h < heads; ++h) {
    if (hd == 64) attend_heads<1, 8, T>(q + h, k, v, at, hd, scale, s, stride, out + h);
    else if (hd == 128) attend_heads<1, 16, T>(q + h, k, v, at, hd, scale, s, stride, out + h);
    else attend_heads<1, 0, T>(q + h, k, v, at, hd, scale, s, stride, out + h);
  }
}

// Several sequences' rows in one call: qkv (N, (nh + 2 nkv)·hd) their rows (rotary applied),
// sequence b's at rows [rows[b], rows[b + 1]); kcs[b]/vcs[b] (kv, cap_b, hd) its own cache, its
// n_b new rows at slots [starts[b], starts[b] + n_b); masks[b] (n_b, starts[b] + n_b) bool
// (true: visible), or empty (causal). Returns o (N, nh·hd). A row attends only to its own
// sequence's visible keys, exactly as alone: (row, KV head) units are shared among the threads.
inline torch::Tensor attention_seqs(torch::Tensor qkv, const std::vector<torch::Tensor>& kcs,
                                    const std::vector<torch::Tensor>& vcs,
                                    const std::vector<int64_t>& rows,
                                    const std::vector<int64_t>& starts,
                                    const std::vector<torch::Tensor>& masks, int64_t nh,
                                    int64_t nkv, int64_t hd) {
  TORCH_CHECK(qkv.scalar_type() == torch::kFloat32 && qkv.is_contiguous() && qkv.dim() == 2,
              "attention: qkv (n, width) contiguous float32");
  const int64_t B = static_cast<int64_t>(starts.size());
  TORCH_CHECK(B >= 1 && static_cast<int64_t>(kcs.size()) == B &&
                  static_cast<int64_t>(vcs.size()) == B &&
                  static_cast<int64_t>(rows.size()) == B + 1 &&
                  static_cast<int64_t>(masks.size()) == B && rows[0] == 0 &&
                  rows[B] == qkv.size(0),
              "attention: rows (B + 1 offsets over qkv's rows), caches, starts, masks (B each)");
  TORCH_CHECK(hd % 8 == 0 && hd <= MAX_HD, "attention: hd a multiple of 8 up to 256");
  const int64_t N = qkv.size(0), width = qkv.size(1);
  std::vector<int64_t> seq(N);            // a row's sequence
  std::vector<const bool*> vis(B, nullptr);
  std::vector<const void*> kp(B), vp(B);  // each sequence's keys and values, (kv, cap_b, hd)
  std::vector<int64_t> cap(B);
  std::vector<torch::Tensor> held(B);     // the masks as contiguous bool, kept alive
  TORCH_CHECK(kcs[0].scalar_type() == torch::kFloat32 || kcs[0].scalar_type() == torch::kBFloat16,
              "attention: a cache in float32 or bfloat16");
  for (int64_t b = 0; b < B; ++b) {
    const auto &kc = kcs[b], &vc = vcs[b];
    TORCH_CHECK(kc.is_contiguous() && vc.is_contiguous() && kc.dim() == 3 &&
                    kc.size(0) == nkv && kc.size(2) == hd && vc.sizes() == kc.sizes() &&
                    kc.scalar_type() == kcs[0].scalar_type() &&
                    vc.scalar_type() == kcs[0].scalar_type(),
                "attention: each cache (kv, cap, hd) contiguous, all of one dtype");
    kp[b] = kc.data_ptr(), vp[b] = vc.data_ptr();
    cap[b] = kc.size(1);
    const int64_t n = rows[b + 1] - rows[b], total = starts[b] + n;
    TORCH_CHECK(n >= 0 && starts[b] >= 0 && total <= cap[b],
                "attention: start + n past the cache");
    for (int64_t r = rows[b]; r < rows[b + 1]; ++r) seq[r] = b;
    if (masks[b].defined() && masks[b].numel()) {
      held[b] = masks[b].reshape({-1, total}).to(torch::kBool).contiguous();
      TORCH_CHECK(held[b].size(0) == n, "attention: mask (n, start + n)");
      vis[b] = held[b].data_ptr<bool>();
    }
  }
  auto o = torch::empty({N, nh * hd}, qkv.options());
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float* qp = qkv.data_ptr<float>();
  float* op = o.data_ptr<float>();
  const int64_t group = nh / nkv;
  const bool bf16 = kcs[0].scalar_type() == torch::kBFloat16;
  int64_t longest = 0;
  for (int64_t b = 0; b < B; ++b) longest = std::max(longest, starts[b] + rows[b + 1] - rows[b]);
  // a unit of work: one row's heads over one KV head (they see the same keys)
  at::parallel_for(0, N * nkv, 1, [&](int64_t a, int64_t e) {
    std::vector<float> s;
    std::vector<int64_t> at;
    std::vector<const float*> qs(group);
    std::vector<float*> outs(group);
    const int64_t stride = (longest + 7) / 8 * 8;
    s.resize(group * stride);
    at.reserve(longest);
    for (int64_t i = a; i < e; ++i) {
      const int64_t row = i / nkv, kv = i % nkv, b = seq[row], r = row - rows[b];
      const int64_t total = starts[b] + rows[b + 1] - rows[b];
      const bool* visible = vis[b] ? vis[b] + r * total : nullptr;
      const int64_t slots = vis[b] ? total : starts[b] + r + 1;
      at.clear();
      for (int64_t j = 0; j < slots; ++j)
        if (!visible || visible[j]) at.push_back(j);
      for (int64_t g = 0; g < group; ++g) {
        qs[g] = qp + row * width + (kv * group + g) * hd;
        outs[g] = op + row * nh * hd + (kv * group + g) * hd;
      }
      const int64_t at_kv = kv * cap[b] * hd;
      auto go = [&](auto* k, auto* v) {  // the cache's element type: float, or bfloat16 bits
        attend_group(qs.data(), group, k + at_kv, v + at_kv, at, hd, scale, s.data(), stride,
                     outs.data());
      };
      if (bf16)
        go(static_cast<const uint16_t*>(kp[b]), static_cast<const uint16_t*>(vp[b]));
      else
        go(static_cast<const float*>(kp[b]), static_cast<const float*>(vp[b]));
    }
  });
  return o;
}

// One sequence: qkv (n, width), kc/vc (kv, cap, hd) this layer's cache with the n new rows at
// slots [start, start + n); mask (n, start + n) bool or none (causal).
inline torch::Tensor attention(torch::Tensor qkv, torch::Tensor kc, torch::Tensor vc,
                               int64_t start, c10::optional<torch::Tensor> mask, int64_t nh,
                               int64_t nkv, int64_t hd) {
  return attention_seqs(qkv, {kc}, {vc}, {0, qkv.size(0)}, {start},
                        {mask.has_value() ? *mask : torch::Tensor()}, nh, nkv, hd);
}

// gu (n, 2I) the fused gate and up projections → silu(gate)·up (n, I), silu(g) = g / (1 + e^−g).
inline torch::Tensor silu_mul(torch::Tensor gu) {
  TORCH_CHECK(gu.scalar_type() == torch::kFloat32 && gu.is_contiguous() && gu.dim() == 2 &&
                  gu.size(1) % 16 == 0,
              "silu_mul: gu (n, 2I) contiguous float32, I a multiple of 8");
  const int64_t n = gu.size(0), I = gu.size(1) / 2;
  auto y = torch::empty({n, I}, gu.options());
  const float* g = gu.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < I; j += 8) {
      const Vec gv = vload(g + r * 2 * I + j), uv = vload(g + r * 2 * I + I + j);
      const Vec e = vexp(vmul(gv, vset(-1.0f)));
      vstore(yp + r * I + j, vmul(vdiv(gv, vadd(vset(1.0f), e)), uv));
    }
  return y;
}

}  // namespace specsweep
