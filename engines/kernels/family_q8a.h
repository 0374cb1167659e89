// Family q8a (model.kernel=native_q8a): y = x · Wᵀ with the activations quantized to int8 per
// block of 32 and the weights repacked into tiles of 16 output rows (contract.h, repack.h).
// Threads take tiles; within a tile the input rows go in chunks of up to the microkernel's
// MAX_M, a compile-time size so that their accumulators live in registers, the tile's weights
// unpacked once per block for the whole chunk. The microkernel: the ISA's own where it has one
// (isa_avx512vnni.h), else RLanes of the build's ISA header (AVX2 or portable).
#pragma once

#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "gemm.h"

namespace specsweep {

using RMicro = std::conditional_t<IsaMicro<Family::q8a>::present, IsaMicro<Family::q8a>, RLanes>;

// The input rows as q8a quantizes them: q (M, K); d, s = d·Σq and sq = Σq (M, K/32).
inline void quantize_rows(const float* x, int64_t M, int64_t K, int8_t* q, float* d, float* s,
                          int32_t* sq) {
  const int64_t nb = K / BLOCK;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < nb; ++b) {
      int32_t sum;
      const float dd = quantize_block(x + m * K + b * BLOCK, q + m * K + b * BLOCK, sum);
      d[m * nb + b] = dd;
      s[m * nb + b] = dd * static_cast<float>(sum);
      sq[m * nb + b] = sum;
    }
}

// y (M, N) for repacked weights w (N output rows) and quantized rows x.
template <typename W>
void q8a_product(const W& w, const XQ& x, int64_t M, float* y, int64_t N) {
  tiled<RMicro>(w, x, M, y, N);
}

// x (M, K) float32 against repacked weights (repack.h: packed (tiles, K/32, CHUNK) uint8) with
// N output rows. The quantized rows live in buffers kept from call to call (no allocation once
// grown), one set per calling thread.
inline torch::Tensor packed_linear(torch::Tensor x, torch::Tensor packed, int64_t N) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
              "x must be a contiguous float32 (M, K) tensor");
  TORCH_CHECK(packed.scalar_type() == torch::kUInt8 && packed.is_contiguous() &&
                  packed.dim() == 3 && packed.size(0) == (N + TILE - 1) / TILE &&
                  (packed.size(2) == R4::CHUNK || packed.size(2) == R8::CHUNK),
              "packed: the repacked weights of N rows, (tiles, K/32, 320 or 576) uint8");
  const int64_t M = x.size(0), nb = packed.size(1), K = nb * BLOCK;
  TORCH_CHECK(x.size(1) == K, "x's K must match the weights");
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> d, s;
  thread_local std::vector<int32_t> sq;
  q.resize(M * K);
  d.resize(M * nb);
  s.resize(M * nb);
  sq.resize(M * nb);
  quantize_rows(x.data_ptr<float>(), M, K, q.data(), d.data(), s.data(), sq.data());
  const XQ xq{q.data(), d.data(), s.data(), sq.data(), K, nb};
  auto y = torch::empty({M, N}, x.options());
  if (packed.size(2) == R4::CHUNK)
    q8a_product(R4{packed.data_ptr<uint8_t>(), K, nb}, xq, M, y.data_ptr<float>(), N);
  else
    q8a_product(R8{packed.data_ptr<uint8_t>(), K, nb}, xq, M, y.data_ptr<float>(), N);
  return y;
}

// The input rows as q8a quantizes them, for tests: (q int8 (M, K), d, s (M, K/32), sq int32).
inline std::vector<torch::Tensor> quantize_q8a(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
              "x must be a contiguous float32 (M, K) tensor");
  const int64_t M = x.size(0), K = x.size(1), nb = K / BLOCK;
  TORCH_CHECK(K % BLOCK == 0, "x's K must divide by 32");
  auto q = torch::empty({M, K}, x.options().dtype(torch::kInt8));
  auto d = torch::empty({M, nb}, x.options());
  auto s = torch::empty({M, nb}, x.options());
  auto sq = torch::empty({M, nb}, x.options().dtype(torch::kInt32));
  quantize_rows(x.data_ptr<float>(), M, K, q.data_ptr<int8_t>(), d.data_ptr<float>(),
                s.data_ptr<float>(), sq.data_ptr<int32_t>());
  return {q, d, s, sq};
}

}  // namespace specsweep
