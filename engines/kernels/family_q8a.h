// Family q8a (model.kernel=native_q8a): y = x · Wᵀ with the activations quantized to int8 per
// block of 32 and integer products (contract.h). Its generic microkernel runs on the build's
// 8-lane primitives (isa.h); isa_avx512vnni.h has one of its own.
#pragma once

#include <torch/extension.h>

#include <vector>

#include "gemm.h"

namespace specsweep {

// The input rows as q8a quantizes them: q (M, K), d, s = d·Σq (M, K/32), d8 (M, K/32, 8).
inline void quantize_rows(const float* x, int64_t M, int64_t K, int8_t* q, float* d, float* s,
                          float* d8) {
  const int64_t nb = K / BLOCK;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < nb; ++b) {
      int32_t sum;
      const float dd = quantize_block(x + m * K + b * BLOCK, q + m * K + b * BLOCK, sum);
      d[m * nb + b] = dd;
      s[m * nb + b] = dd * static_cast<float>(sum);
      for (int j = 0; j < 8; ++j) d8[(m * nb + b) * 8 + j] = dd;
    }
}

// Generic microkernel (gemm.h): one output row at a time against MM input rows.
struct Q8aLanes {
  static constexpr int MAX_M = 8;
  template <int MM, typename W>
  static void chunk(const W& w, int64_t n0, int64_t rows, const XQ& x, float* y, int64_t N) {
    for (int64_t r = 0; r < rows; ++r) {
      Vec a[2][MM];
      for (int m = 0; m < MM; ++m) a[0][m] = a[1][m] = vzero();
      for (int64_t b = 0; b < x.nb; ++b) q8a_block<MM>(w, n0 + r, b, x, a);
      for (int m = 0; m < MM; ++m)
        y[m * N + n0 + r] = finish(a[0][m], a[1][m]) + q8a_offsets(w, n0 + r, x, m);
    }
  }
};

// x (M, K) float32, checked by the caller (linear.h).
template <typename W>
torch::Tensor linear_q8a(const W& w, const torch::Tensor& x, int64_t N) {
  const int64_t M = x.size(0), K = w.K, nb = K / BLOCK;
  // the quantized rows, in buffers kept from call to call (no allocation once grown)
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> d, s, d8;
  q.resize(M * K);
  d.resize(M * nb);
  s.resize(M * nb);
  d8.resize(M * nb * 8);
  quantize_rows(x.data_ptr<float>(), M, K, q.data(), d.data(), s.data(), d8.data());
  const XQ xq{q.data(), d.data(), s.data(), d8.data(), K, nb};
  auto y = torch::empty({M, N}, x.options());
  product<Family::q8a, Q8aLanes>(w, xq, M, y.data_ptr<float>(), N);
  return y;
}

// The input rows as q8a quantizes them, for tests: (q int8 (M, K), d (M, K/32), s (M, K/32)).
inline std::vector<torch::Tensor> quantize_q8a(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
              "x must be a contiguous float32 (M, K) tensor");
  const int64_t M = x.size(0), K = x.size(1), nb = K / BLOCK;
  TORCH_CHECK(K % BLOCK == 0, "x's K must divide by 32");
  auto q = torch::empty({M, K}, x.options().dtype(torch::kInt8));
  auto d = torch::empty({M, nb}, x.options());
  auto s = torch::empty({M, nb}, x.options());
  std::vector<float> d8(M * nb * 8);
  quantize_rows(x.data_ptr<float>(), M, K, q.data_ptr<int8_t>(), d.data_ptr<float>(),
                s.data_ptr<float>(), d8.data());
  return {q, d, s};
}

}  // namespace specsweep
