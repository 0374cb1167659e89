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

// bf16 (contract.h): a tile's 16 output rows are the 16 lanes; per pair, one vector of weights
// (lane r: w[r][2p], w[r][2p + 1]) and, per input row, the pair of activations broadcast to
// every lane. With AVX512-BF16 one vdpbf16ps is the pair's two steps; without it, the same two
// steps as two fmas in a FlushTiny scope (isa_avx2.h: the CPU flushes tiny results as the
// instruction does; no input is subnormal: the family's rounding and repack flush them).
template <>
struct IsaMicro<Family::bf16> {
  static constexpr bool present = true;
  static constexpr int MAX_M = 16;

  static __m512 step(__m512 acc, __m512i w, const uint16_t* xp) {
    int32_t v;
    std::memcpy(&v, xp, 4);
#ifdef __AVX512BF16__
    return _mm512_dpbf16_ps(acc, (__m512bh)w, (__m512bh)_mm512_set1_epi32(v));
#else
    const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    const __m512i xv = _mm512_set1_epi32(v);
    acc = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(w, hi)),
                          _mm512_castsi512_ps(_mm512_and_si512(xv, hi)), acc);
    return _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)),
                           _mm512_castsi512_ps(_mm512_slli_epi32(xv, 16)), acc);
#endif
  }

  template <int MM>
  static void tile(const RB& w, int64_t t, const XB& x, float* out) {
#ifndef __AVX512BF16__
    const FlushTiny scope;
#endif
    __m512 acc[MM];
    for (int m = 0; m < MM; ++m) acc[m] = _mm512_setzero_ps();
    for (int64_t b = 0; b < x.nb; ++b) {
      const uint8_t* c = w.chunk(t, b);
      for (int p = 0; p < 16; ++p) {
        _mm_prefetch(reinterpret_cast<const char*>(c + 4 * RB::CHUNK + p * 64), _MM_HINT_T0);
        const __m512i wv = _mm512_loadu_si512(c + p * 64);
        for (int m = 0; m < MM; ++m) acc[m] = step(acc[m], wv, x.b + m * x.K + b * BLOCK + 2 * p);
      }
    }
    for (int m = 0; m < MM; ++m) _mm512_storeu_ps(out + m * TILE, acc[m]);
  }
};

}  // namespace specsweep
