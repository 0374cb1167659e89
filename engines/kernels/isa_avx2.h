// AVX2 + FMA: the 8-lane primitives (isa.h lists them) on __m256, the same operations in the
// same order as isa_portable.h.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "contract.h"

namespace specsweep {

using Vec = __m256;

inline Vec vzero() { return _mm256_setzero_ps(); }
inline Vec vload(const float* p) { return _mm256_loadu_ps(p); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }

inline float finish(Vec a0, Vec a1) {
  const __m256 v = _mm256_add_ps(a0, a1);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// f32: one block's 32 weights as four vectors, w = fma(q, d, m) (q4) or q·d (q8).
inline void q4_block(const uint8_t* p, float d_, float m_, Vec w[4]) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i lo = _mm_and_si128(bytes, _mm_set1_epi8(0x0F));
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(0x0F));
  const __m256 d = _mm256_set1_ps(d_), m = _mm256_set1_ps(m_);
  w[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), d, m);
  w[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))), d, m);
  w[2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), d, m);
  w[3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))), d, m);
}

inline void q8_block(const int8_t* p, float d_, Vec w[4]) {
  const __m256 d = _mm256_set1_ps(d_);
  for (int j = 0; j < 4; ++j) {
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * j));
    w[j] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), d);
  }
}

// q8a: 32 activations to int8 (`out`), their sum (`sum`); returns the block's scale d. The same
// bytes as the portable loop: |x|'s maximum, one division, x·(1/d) rounded to nearest even
// (cvtps_epi32's default rounding, as nearbyint's).
inline float quantize_block(const float* p, int8_t* out, int32_t& sum) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  for (int j = 0; j < 4; ++j) v[j] = _mm256_loadu_ps(p + 8 * j);
  __m256 mx = _mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1]));
  mx = _mm256_max_ps(mx, _mm256_max_ps(_mm256_andnot_ps(sign, v[2]),
                                       _mm256_andnot_ps(sign, v[3])));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
  const float amax = _mm_cvtss_f32(h);
  const float dd = amax / 127.0f;
  const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
  const __m256 idv = _mm256_set1_ps(id);
  __m256i iv[4];
  for (int j = 0; j < 4; ++j) iv[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], idv));
  const __m256i sum4 =
      _mm256_add_epi32(_mm256_add_epi32(iv[0], iv[1]), _mm256_add_epi32(iv[2], iv[3]));
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(sum4), _mm256_extracti128_si256(sum4, 1));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(1, 0, 3, 2)));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1)));
  sum = _mm_cvtsi128_si32(t);
  // packs interleave the 128-bit lanes; the permutation puts the 32 bytes back in order
  const __m256i b16 =
      _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3]));
  const __m256i bytes =
      _mm256_permutevar8x32_epi32(b16, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), bytes);
  return dd;
}

inline __m256i q4_bytes(const Q4& w, int64_t n, int64_t b) {  // 32 weights, natural order
  const __m128i bytes =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.nib + n * (w.K / 2) + b * 16));
  const __m128i lo = _mm_and_si128(bytes, _mm_set1_epi8(0x0F));
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(0x0F));
  return _mm256_set_m128i(hi, lo);
}

// q8a: block b of weight row n against MM input rows, into a[b & 1][m]; lane i of the integer
// sum is bytes 4i..4i+3 (maddubs pairs, then madd pairs of pairs).
template <int MM, typename W>
inline void q8a_block(const W& w, int64_t n, int64_t b, const XQ& x, Vec a[2][MM]) {
  const int64_t nb = x.nb;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i wv, wq;
  if constexpr (std::is_same_v<W, Q4>) {
    wv = q4_bytes(w, n, b);
  } else {
    wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.q + n * w.K + b * BLOCK));
    wv = _mm256_sign_epi8(wq, wq);  // |w| as unsigned bytes; the sign moves to x
  }
  const float dw = w.scale[n * nb + b];
  for (int m = 0; m < MM; ++m) {
    __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + m * x.K + b * BLOCK));
    if constexpr (!std::is_same_v<W, Q4>) xv = _mm256_sign_epi8(xv, wq);
    const __m256i is = _mm256_madd_epi16(_mm256_maddubs_epi16(wv, xv), ones);
    const __m256 sc = _mm256_set1_ps(dw * x.d[m * nb + b]);
    a[b & 1][m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), sc, a[b & 1][m]);
  }
}

// Row ops: Σ a[k]·b[k] over n (a multiple of 8), 16 at a time into two accumulators, then finish.
inline float dot(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 8), _mm256_loadu_ps(b + k + 8), s1);
  }
  if (k < n) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), s0);
  return finish(s0, s1);
}

}  // namespace specsweep
