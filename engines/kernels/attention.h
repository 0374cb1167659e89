// Decode attention over the cache, and the MLP's SiLU·mul: one row at a time, in an order that
// depends on nothing but the row (contract.h's promise, kept here for the ops between the
// products). A query row attends to its visible keys (the mask's row, or causally every key up
// to its own slot) in slot order, which is position order (a tree's nodes come after their
// ancestors): its scores by the ISA's `dot`, their maximum, each key's weight exp(s − max) by
// `vexp` (one sequence of fmas on every build, lane by lane, so the grouping of keys in vectors
// changes nothing), the weights' sum key by key, and the output as one fma per key over the
// head's values, divided by the sum at the end. Neither the cache slots of masked keys nor the
// number of query rows enters a row's numbers: a row alone or among 64 tree nodes gives the
// same bits.
#pragma once

#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <cmath>
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

// One query row against one KV head: q (hd), k and v (slots, hd) from slot 0, `visible` the
// mask's row over `slots` (or null: all of them); out (hd). scores: scratch of `slots` floats.
inline void attend(const float* q, const float* k, const float* v, const bool* visible,
                   int64_t slots, int64_t hd, float scale, float* out, std::vector<float>& s,
                   std::vector<int64_t>& at) {
  s.clear();
  at.clear();
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < slots; ++j)
    if (!visible || visible[j]) {
      const float sj = dot(q, k + j * hd, hd) * scale;
      s.push_back(sj);
      at.push_back(j);
      mx = std::max(mx, sj);
    }
  const int64_t c = static_cast<int64_t>(s.size());
  s.resize((c + 7) / 8 * 8, mx);  // a last partial vector: lanes past c are computed, unused
  for (int64_t j = 0; j < c; j += 8) vstore(s.data() + j, vexp(vadd(vload(s.data() + j), vset(-mx))));
  float sum = 0.0f;
  for (int64_t j = 0; j < c; ++j) sum += s[j];
  // each output lane's chain runs over the keys in order; the lanes' chains side by side
  Vec o[MAX_HD / 8];
  const int64_t w = hd / 8;
  for (int64_t d = 0; d < w; ++d) o[d] = vzero();
  for (int64_t j = 0; j < c; ++j) {
    const Vec p = vset(s[j]);
    const float* vj = v + at[j] * hd;
    for (int64_t d = 0; d < w; ++d) o[d] = vfma(p, vload(vj + 8 * d), o[d]);
  }
  for (int64_t d = 0; d < w; ++d) vstore(out + 8 * d, vdiv(o[d], vset(sum)));
}

// qkv (n, (nh + 2 nkv)·hd) rows (rotary applied), kc/vc (kv, cap, hd) this layer's cache with
// the n new rows at slots [start, start + n); mask (n, start + n) bool (true: visible) or none
// (causal). Returns o (n, nh·hd). Rows × heads are shared among the threads.
inline torch::Tensor attention(torch::Tensor qkv, torch::Tensor kc, torch::Tensor vc,
                               int64_t start, c10::optional<torch::Tensor> mask, int64_t nh,
                               int64_t nkv, int64_t hd) {
  TORCH_CHECK(qkv.scalar_type() == torch::kFloat32 && qkv.is_contiguous() && qkv.dim() == 2,
              "attention: qkv (n, width) contiguous float32");
  TORCH_CHECK(kc.is_contiguous() && vc.is_contiguous() && kc.dim() == 3 && kc.size(0) == nkv &&
                  kc.size(2) == hd && hd % 8 == 0 && hd <= MAX_HD,
              "attention: kc, vc (kv, cap, hd) contiguous, hd a multiple of 8 up to 256");
  const int64_t n = qkv.size(0), width = qkv.size(1), cap = kc.size(1), total = start + n;
  TORCH_CHECK(total <= cap, "attention: start + n past the cache");
  const bool* vis = nullptr;
  torch::Tensor m;
  if (mask.has_value() && mask->defined()) {
    m = mask->reshape({-1, total}).to(torch::kBool).contiguous();
    TORCH_CHECK(m.size(0) == n, "attention: mask (n, start + n)");
    vis = m.data_ptr<bool>();
  }
  auto o = torch::empty({n, nh * hd}, qkv.options());
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float *qp = qkv.data_ptr<float>(), *kp = kc.data_ptr<float>(), *vp = vc.data_ptr<float>();
  float* op = o.data_ptr<float>();
  const int64_t group = nh / nkv;
  at::parallel_for(0, n * nh, 1, [&](int64_t a, int64_t b) {
    std::vector<float> s;
    std::vector<int64_t> at;
    s.reserve(total + 8);
    at.reserve(total);
    for (int64_t i = a; i < b; ++i) {
      const int64_t row = i / nh, h = i % nh, kv = h / group;
      attend(qp + row * width + h * hd, kp + kv * cap * hd, vp + kv * cap * hd,
             vis ? vis + row * total : nullptr, vis ? total : start + row + 1, hd, scale,
             op + row * nh * hd + h * hd, s, at);
    }
  });
  return o;
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
