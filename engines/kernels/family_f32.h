// Family f32 (model.kernel=native): y = x · Wᵀ with the float32 activations as they are, each
// weight expanded to float32 exactly (contract.h). Its generic microkernel runs on the build's
// 8-lane primitives (isa.h); isa_avx512.h has one of its own.
#pragma once

#include <torch/extension.h>

#include "gemm.h"

namespace specsweep {

// Block b of weight row n as four 8-lane vectors.
inline void expand(const Q4& w, int64_t n, int64_t b, Vec v[4]) {
  const int64_t nb = w.K / BLOCK;
  q4_block(w.nib + n * (w.K / 2) + b * 16, w.scale[n * nb + b], w.offset[n * nb + b], v);
}

inline void expand(const Q8& w, int64_t n, int64_t b, Vec v[4]) {
  q8_block(w.q + n * w.K + b * BLOCK, w.scale[n * (w.K / BLOCK) + b], v);
}

// contract.h's order for one block: a0 += w[0:8]·x[0:8]; a1 += w[8:16]·x[8:16];
// a0 += w[16:24]·x[16:24]; a1 += w[24:32]·x[24:32].
inline void acc_block(const Vec w[4], const float* x, Vec& a0, Vec& a1) {
  a0 = vfma(w[0], vload(x), a0);
  a1 = vfma(w[1], vload(x + 8), a1);
  a0 = vfma(w[2], vload(x + 16), a0);
  a1 = vfma(w[3], vload(x + 24), a1);
}

// Generic microkernel (gemm.h): one output row at a time against MM input rows, each block of
// the row expanded once for all MM.
struct F32Lanes {
  static constexpr int MAX_M = 8;
  template <int MM, typename W>
  static void chunk(const W& w, int64_t n0, int64_t rows, const XF& x, float* y, int64_t N) {
    const int64_t K = x.K, nb = K / BLOCK;
    Vec wb[4];
    for (int64_t r = 0; r < rows; ++r) {
      Vec a0[MM], a1[MM];
      for (int m = 0; m < MM; ++m) a0[m] = a1[m] = vzero();
      for (int64_t b = 0; b < nb; ++b) {
        expand(w, n0 + r, b, wb);
        for (int m = 0; m < MM; ++m) acc_block(wb, x.data + m * K + b * BLOCK, a0[m], a1[m]);
      }
      for (int m = 0; m < MM; ++m) y[m * N + n0 + r] = finish(a0[m], a1[m]);
    }
  }
};

// x (M, K) float32, checked by the caller (linear.h).
template <typename W>
torch::Tensor linear_f32(const W& w, const torch::Tensor& x, int64_t N) {
  const int64_t M = x.size(0);
  auto y = torch::empty({M, N}, x.options());
  product<Family::f32, F32Lanes>(w, XF{x.data_ptr<float>(), w.K}, M, y.data_ptr<float>(), N);
  return y;
}

}  // namespace specsweep
