// AVX-512 with BW and VNNI: isa_avx512.h and q8a's own microkernel over the repacked tiles
// (contract.h): a tile's 16 output rows are the 16 lanes, and one vpdpbusd with an activation
// word broadcast to every lane advances all 16 rows by 4 inputs (64 multiply-adds). Per block,
// the weights are unpacked once for every input row, and the scaling is one conversion, one
// multiply and one or two fmas for 16 outputs. The integer sums are exact, so the two chains
// the eight vpdpbusd per block are split into (for latency) change nothing; q8's weights are
// stored as w + 128 (vpdpbusd's unsigned operand), the chain starting from −128 · Σqx.
#pragma once

#include "isa_avx512.h"

namespace specsweep {

template <>
struct IsaMicro<Family::q8a> {
  static constexpr bool present = true;
  static constexpr int MAX_M = 16;

  static __m512i word(const int8_t* p) {  // 4 activation bytes to every lane
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
  }

  template <int MM, typename W>
  static void tile(const W& w, int64_t t, const XQ& x, float* out) {
    __m512 acc[MM];
    for (int m = 0; m < MM; ++m) acc[m] = _mm512_setzero_ps();
    for (int64_t b = 0; b < x.nb; ++b) {
      const uint8_t* c = w.chunk(t, b);
      prefetch_chunk<W>(c + PREFETCH * W::CHUNK);
      __m512i wv[8];
      __m512 dw, mw = _mm512_setzero_ps();
      if constexpr (std::is_same_v<W, R4>) {
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        for (int j = 0; j < 4; ++j) {
          const __m512i v = _mm512_loadu_si512(c + j * 64);
          wv[j] = _mm512_and_si512(v, m4);
          wv[j + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        }
        dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 256)));
        mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 288)));
      } else {
        for (int g = 0; g < 8; ++g) wv[g] = _mm512_loadu_si512(c + g * 64);
        dw = _mm512_loadu_ps(c + 512);
      }
      for (int m = 0; m < MM; ++m) {
        const int8_t* xq = x.q + m * x.K + b * BLOCK;
        __m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
        if constexpr (std::is_same_v<W, R8>) i0 = _mm512_set1_epi32(-128 * x.sq[m * x.nb + b]);
        for (int g = 0; g < 8; g += 2) {
          i0 = _mm512_dpbusd_epi32(i0, wv[g], word(xq + 4 * g));
          i1 = _mm512_dpbusd_epi32(i1, wv[g + 1], word(xq + 4 * g + 4));
        }
        const __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(x.d[m * x.nb + b]));
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(i0, i1)), sc, acc[m]);
        if constexpr (std::is_same_v<W, R4>)
          acc[m] = _mm512_fmadd_ps(mw, _mm512_set1_ps(x.s[m * x.nb + b]), acc[m]);
      }
    }
    for (int m = 0; m < MM; ++m) _mm512_storeu_ps(out + m * TILE, acc[m]);
  }
};

}  // namespace specsweep
