// The per-row layer ops of the lean forward: RMS norm, the residual add with it, rotary. One
// thread each: these tensors are a few KB. Each output row depends only on its own input row,
// with a fixed order of operations (the norm's Σx² is the ISA's `dot`, whose order isa.h fixes),
// as for the products. They replace chains of small torch ops (an RMS norm is six, each with its
// dispatch and threading overhead: ~35 µs for 576 values on two cores).
#pragma once

#include <torch/extension.h>

#include <cmath>

#include "isa.h"

namespace specsweep {

inline void check_rows(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.scalar_type() == torch::kFloat32 && t.is_contiguous() && t.device().is_cpu(),
              name, " must be a contiguous float32 CPU tensor");
}

inline void norm_row(const float* x, const float* w, float* y, int64_t H, float eps) {
  const float inv = 1.0f / std::sqrt(dot(x, x, H) / static_cast<float>(H) + eps);
  for (int64_t k = 0; k < H; ++k) y[k] = w[k] * (x[k] * inv);
}

// y = w · x / sqrt(mean(x²) + eps), row by row; x (R, H), H a multiple of 8.
inline torch::Tensor rms_norm(torch::Tensor x, torch::Tensor w, double eps) {
  check_rows(x, "x");
  check_rows(w, "w");
  const int64_t H = x.size(-1), R = x.numel() / H;
  TORCH_CHECK(H % 8 == 0 && w.numel() == H, "rms_norm: H must divide by 8 and match w");
  auto y = torch::empty_like(x);
  for (int64_t r = 0; r < R; ++r)
    norm_row(x.data_ptr<float>() + r * H, w.data_ptr<float>(), y.data_ptr<float>() + r * H, H,
             static_cast<float>(eps));
  return y;
}

// x += r in place (the residual stream), one float sum a value as torch's add_ makes it.
inline void add_(torch::Tensor x, const torch::Tensor& r) {
  check_rows(x, "x");
  check_rows(r, "r");
  TORCH_CHECK(x.numel() == r.numel(), "add_: x and r differ in size");
  const int64_t n = x.numel();
  float* xp = x.data_ptr<float>();
  const float* rp = r.data_ptr<float>();
  for (int64_t k = 0; k < n; ++k) xp[k] += rp[k];
}

// x += r in place (the residual stream); returns rms_norm(x).
inline torch::Tensor add_rms_norm_(torch::Tensor x, torch::Tensor r, torch::Tensor w, double eps) {
  add_(x, r);
  return rms_norm(x, w, eps);
}

// Rotary in place on the first `heads` heads of each row: x (R, width) holding heads of hd
// values from its start (q and k of a fused projection), cos/sin (R, hd), sin carrying
// rotate_half's sign: x ← x·cos + roll(x, hd/2)·sin. Each value is one product by its cos plus
// one by its sin (its partner half a head away), the halves swapped in registers: no temporary,
// no index arithmetic per value, and the loop vectorises (the same two products and one sum per
// value, hence the same bits, in any width).
inline void rope_(torch::Tensor x, int64_t heads, int64_t hd, torch::Tensor cos,
                  torch::Tensor sin) {
  check_rows(x, "x");
  check_rows(cos, "cos");
  check_rows(sin, "sin");
  const int64_t width = x.size(-1), R = x.numel() / width, half = hd / 2;
  TORCH_CHECK(heads * hd <= width && cos.numel() == R * hd && hd % 2 == 0, "rope_: bad shapes");
  float* xp = x.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  for (int64_t r = 0; r < R; ++r) {
    const float* __restrict c = cp + r * hd;
    const float* __restrict s = sp + r * hd;
    for (int64_t h = 0; h < heads; ++h) {
      float* __restrict lo = xp + r * width + h * hd;
      float* __restrict hi = lo + half;
      for (int64_t k = 0; k < half; ++k) {
        const float a = lo[k], b = hi[k];
        lo[k] = a * c[k] + b * s[k];
        hi[k] = b * c[k + half] + a * s[k + half];
      }
    }
  }
}

}  // namespace specsweep
