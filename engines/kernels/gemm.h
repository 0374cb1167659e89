// The one GEMM driver: y (M, N) = x (M, K) · Wᵀ for any family, over a microkernel.
//
// Threads take tiles of ROWS output rows. Within a tile, input rows go in chunks of up to
// Micro::MAX_M, the chunk's size a compile-time constant so that its accumulators live in
// registers: each block of weights is expanded into registers once per chunk and used for every
// row of it. The split changes which rows share an expansion, never the operations of a y[m, n]
// (contract.h), so any chunking gives the same bits.
//
// A microkernel is a struct with
//   static constexpr int MAX_M;       the most input rows per chunk
//   template <int MM, typename W>
//   static void chunk(const W& w, int64_t n0, int64_t rows, const X& x, float* y, int64_t N);
//       y[m·N + n0 + r] for the input rows m < MM of x (XF or XQ, from the chunk's first row)
//       and the weight rows n0 + r, r < rows
// and, for an ISA's own one (IsaMicro), `present` and `fits(x)`.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "isa.h"

namespace specsweep {

// f(integral_constant<int, m>) for a run-time m in [MM, MAX]: the chunk's size as a constant.
template <int MM, int MAX, typename F>
inline void with_size(int64_t m, F&& f) {
  if constexpr (MM < MAX) {
    if (m == MM) return f(std::integral_constant<int, MM>{});
    with_size<MM + 1, MAX>(m, f);
  } else {
    f(std::integral_constant<int, MAX>{});
  }
}

template <typename Micro, typename W, typename X>
void gemm(const W& w, const X& x, int64_t M, float* y, int64_t N) {
  constexpr int MAX_M = Micro::MAX_M;
  const int64_t tiles = (N + ROWS - 1) / ROWS;
  at::parallel_for(0, tiles, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n0 = t * ROWS, rows = std::min(ROWS, N - n0);
      for (int64_t m0 = 0; m0 < M; m0 += MAX_M)
        with_size<1, MAX_M>(std::min<int64_t>(MAX_M, M - m0), [&](auto mm) {
          Micro::template chunk<decltype(mm)::value>(w, n0, rows, x.at(m0), y + m0 * N, N);
        });
    }
  });
}

// The driver of the families whose weights are repacked into tiles of TILE output rows (q8a,
// bf16): threads take tiles; within a tile the input rows go in chunks of up to Micro::MAX_M,
// Micro::tile<MM>(w, t, x, out) writing out[m · TILE + r], copied into y (rows past N dropped).
template <typename Micro, typename W, typename X>
void tiled(const W& w, const X& x, int64_t M, float* y, int64_t N) {
  constexpr int MAX_M = Micro::MAX_M;
  const int64_t tiles = (N + TILE - 1) / TILE;
  at::parallel_for(0, tiles, 1, [&](int64_t t0, int64_t t1) {
    float out[MAX_M * TILE];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n0 = t * TILE, rows = std::min(TILE, N - n0);
      for (int64_t m0 = 0; m0 < M; m0 += MAX_M) {
        const int64_t mm = std::min<int64_t>(MAX_M, M - m0);
        with_size<1, MAX_M>(mm, [&](auto c) {
          Micro::template tile<decltype(c)::value>(w, t, x.at(m0), out);
        });
        for (int64_t m = 0; m < mm; ++m)
          std::copy(out + m * TILE, out + m * TILE + rows, y + (m0 + m) * N + n0);
      }
    }
  });
}

// Family F's product: the ISA's own microkernel where it has one that takes these inputs,
// else the family's generic one.
template <Family F, typename Generic, typename W, typename X>
void product(const W& w, const X& x, int64_t M, float* y, int64_t N) {
  if constexpr (IsaMicro<F>::present) {
    if (IsaMicro<F>::fits(x)) return gemm<IsaMicro<F>>(w, x, M, y, N);
  }
  gemm<Generic>(w, x, M, y, N);
}

}  // namespace specsweep
