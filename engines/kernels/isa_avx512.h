// AVX-512F: the AVX2 primitives (isa_avx2.h) and f32's own microkernel, two 8-lane halves per
// instruction: a block's weights as two 16-lane vectors [w[0] | w[1]], [w[2] | w[3]], so that
// the two fmas per block below are contract.h's four, lanes 0-7 being a0 and lanes 8-15 a1, and
// finish_wide is finish(a0, a1): the AVX2 build's bits. With 32 vector registers it takes up to
// 12 input rows per chunk and, for small chunks, several output rows in flight so that their
// accumulator chains hide the fma latency.
#pragma once

#define SPECSWEEP_VEC_REGS 32  // AVX-512VL: 8-lane vectors in any of 32 registers
#include "isa_avx2.h"

namespace specsweep {

using Wide = __m512;

// acc = [a0 | a1]
inline float finish_wide(Wide a) {
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
  return finish(_mm512_castps512_ps256(a), hi);
}

// Block blk of weight row n as [w[0] | w[1]], [w[2] | w[3]], each lane computed exactly as
// q4_block / q8_block compute it.
inline void wide_block(const Q4& b, int64_t n, int64_t blk, Wide w[2]) {
  // The block's 16 possible weights scale·i + offset (i = 0..15) computed once, by the same fma
  // that expands each weight, then looked up by nibble: vpermps reads an index's low 4 bits, so
  // the widened bytes index the low nibbles as they are and, shifted by 4, the high ones.
  const int64_t nb = b.K / BLOCK;
  const __m128i bytes =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.nib + n * (b.K / 2) + blk * 16));
  const __m512i idx = _mm512_cvtepu8_epi32(bytes);
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512 table = _mm512_fmadd_ps(iota, _mm512_set1_ps(b.scale[n * nb + blk]),
                                       _mm512_set1_ps(b.offset[n * nb + blk]));
  w[0] = _mm512_permutexvar_ps(idx, table);
  w[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(idx, 4), table);
}

inline void wide_block(const Q8& b, int64_t n, int64_t blk, Wide w[2]) {
  const int8_t* p = b.q + n * b.K + blk * BLOCK;
  const __m512 d = _mm512_set1_ps(b.scale[n * (b.K / BLOCK) + blk]);
  for (int j = 0; j < 2; ++j) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * j));
    w[j] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)), d);
  }
}

// Output rows from n0 in groups of RR, then singly: kernel(RR as an integral_constant, r) for
// the group at n0 + r. Fewer input rows (MM), more output rows in flight.
template <int MM, typename Kernel>
inline void in_groups(int64_t rows, Kernel&& kernel) {
  constexpr int RR = MM <= 4 ? 4 : MM <= 8 ? 2 : 1;
  int64_t r = 0;
  for (; r + RR <= rows; r += RR) kernel(std::integral_constant<int, RR>{}, r);
  for (; r < rows; ++r) kernel(std::integral_constant<int, 1>{}, r);
}

// f32: MM input rows × RR output rows from n0, every accumulator in a register: per block, the
// RR rows' weights are expanded first, then each input row's 32 values are loaded once for all RR.
template <int MM, int RR, typename W>
void f32_wide(const W& w, int64_t n0, const XF& x, float* y, int64_t N) {
  const int64_t K = x.K, nb = K / BLOCK;
  Wide acc[RR][MM];
  for (int r = 0; r < RR; ++r)
    for (int m = 0; m < MM; ++m) acc[r][m] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    Wide wb[RR][2];
    for (int r = 0; r < RR; ++r) wide_block(w, n0 + r, b, wb[r]);
    for (int m = 0; m < MM; ++m) {
      const float* xm = x.data + m * K + b * BLOCK;
      const Wide x0 = _mm512_loadu_ps(xm), x1 = _mm512_loadu_ps(xm + 16);
      for (int r = 0; r < RR; ++r) {
        acc[r][m] = _mm512_fmadd_ps(wb[r][0], x0, acc[r][m]);
        acc[r][m] = _mm512_fmadd_ps(wb[r][1], x1, acc[r][m]);
      }
    }
  }
  for (int r = 0; r < RR; ++r)
    for (int m = 0; m < MM; ++m) y[m * N + n0 + r] = finish_wide(acc[r][m]);
}

template <>
struct IsaMicro<Family::f32> {
  static constexpr bool present = true;
  static constexpr int MAX_M = 12;  // 16 rows ran slower than 12 + 4 here (register pressure)
  static bool fits(const XF&) { return true; }
  template <int MM, typename W>
  static void chunk(const W& w, int64_t n0, int64_t rows, const XF& x, float* y, int64_t N) {
    in_groups<MM>(rows, [&](auto rr, int64_t r) {
      f32_wide<MM, decltype(rr)::value>(w, n0 + r, x, y, N);
    });
  }
};

}  // namespace specsweep
