// AVX-512 with BW and VNNI: isa_avx512.h and q8a's own microkernel, two blocks per instruction:
// lanes 0-7 hold block b (contract.h's a0, the even blocks) and lanes 8-15 block b + 1 (a1), each
// lane i the integer sum of its block's bytes 4i..4i+3 (vpdpbusd), so finish_wide gives the
// AVX2 build's bits. Needs an even number of blocks per row; otherwise q8a's generic microkernel
// runs (on AVX2's 8-lane primitives).
#pragma once

#include "isa_avx512.h"

namespace specsweep {

inline __m512 pair_scale(const float* p) {  // [p[0] ×8 | p[1] ×8]
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(p[0])),
                                             _mm256_castps_pd(_mm256_set1_ps(p[1])), 1));
}

// MM input rows × RR output rows from n0.
template <int MM, int RR, typename W>
void q8a_wide(const W& w, int64_t n0, const XQ& x, float* y, int64_t N) {
  const int64_t nb = x.nb, K = x.K;
  __m512 acc[RR][MM];
  for (int r = 0; r < RR; ++r)
    for (int m = 0; m < MM; ++m) acc[r][m] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b += 2) {
    for (int r = 0; r < RR; ++r) {
      const int64_t n = n0 + r;
      __m512i wv;
      __mmask64 neg = 0;
      if constexpr (std::is_same_v<W, Q4>) {
        const __m256i nib =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.nib + n * (K / 2) + b * 16));
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        const __m256i lo = _mm256_and_si256(nib, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(nib, 4), m4);
        // [b.lo, b1.lo, b.hi, b1.hi] → [b.lo, b.hi, b1.lo, b1.hi]: both blocks in natural order
        wv = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        wv = _mm512_shuffle_i64x2(wv, wv, _MM_SHUFFLE(3, 1, 2, 0));
      } else {
        const __m512i wq = _mm512_loadu_si512(w.q + n * K + b * BLOCK);
        neg = _mm512_movepi8_mask(wq);  // |w| as unsigned bytes; the sign moves to x
        wv = _mm512_abs_epi8(wq);
      }
      const __m512 dw = pair_scale(w.scale + n * nb + b);
      for (int m = 0; m < MM; ++m) {
        __m512i xv = _mm512_loadu_si512(x.q + m * K + b * BLOCK);
        if constexpr (!std::is_same_v<W, Q4>)
          xv = _mm512_mask_sub_epi8(xv, neg, _mm512_setzero_si512(), xv);
        const __m512i is = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, xv);
        const __m512 sc = _mm512_mul_ps(dw, _mm512_loadu_ps(x.d8 + (m * nb + b) * 8));
        acc[r][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), sc, acc[r][m]);
      }
    }
  }
  for (int r = 0; r < RR; ++r)
    for (int m = 0; m < MM; ++m)
      y[m * N + n0 + r] = finish_wide(acc[r][m]) + q8a_offsets(w, n0 + r, x, m);
}

template <>
struct IsaMicro<Family::q8a> {
  static constexpr bool present = true;
  static constexpr int MAX_M = 12;
  static bool fits(const XQ& x) { return x.nb % 2 == 0; }  // blocks in pairs
  template <int MM, typename W>
  static void chunk(const W& w, int64_t n0, int64_t rows, const XQ& x, float* y, int64_t N) {
    in_groups<MM>(rows, [&](auto rr, int64_t r) {
      q8a_wide<MM, decltype(rr)::value>(w, n0 + r, x, y, N);
    });
  }
};

}  // namespace specsweep
