// AVX2 + FMA: the 8-lane primitives (isa.h lists them) on __m256, the same operations in the
// same order as isa_portable.h.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "contract.h"

#ifndef SPECSWEEP_VEC_REGS
#define SPECSWEEP_VEC_REGS 16  // the registers 8-lane vectors may live in
#endif

namespace specsweep {

using Vec = __m256;

inline Vec vzero() { return _mm256_setzero_ps(); }
inline Vec vload(const float* p) { return _mm256_loadu_ps(p); }
// eight bfloat16 (their bits) widened to float32: exact, the bits shifted into the high half
inline Vec vload(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }

inline void vstore(float* p, Vec a) { _mm256_storeu_ps(p, a); }
inline Vec vset(float x) { return _mm256_set1_ps(x); }
inline Vec vmul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
inline Vec vadd(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline Vec vdiv(Vec a, Vec b) { return _mm256_div_ps(a, b); }
inline Vec vclamp(Vec a, float lo, float hi) {  // max(lo, min(a, hi)), as the portable lanes
  return _mm256_max_ps(_mm256_set1_ps(lo), _mm256_min_ps(a, _mm256_set1_ps(hi)));
}
inline Vec vround(Vec a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline Vec vpow2(Vec n) {
  const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}

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

// q8a: a tile's TILE output rows against MM input rows (contract.h's order), into
// out[m · TILE + r], as two halves of 8 rows, lane r of a vector for row r of the half. The
// integer sums by maddubs (unsigned weights × signed activation words, broadcast) and madd:
// q4's nibbles ≤ 15 keep all eight groups' pair sums within 16 bits (8 · 2 · 15 · 127 < 2¹⁵),
// so they add as int16 before one madd; q8's bytes are w + 128, so w comes back by xor and
// its sign moves onto the activations (|w| · ±x ≤ 2 · 128 · 127 per pair), one madd a group.

// A chunk's cache lines, PREFETCH chunks ahead of the one read (past a thread's last chunk it
// reads nothing: a prefetch never faults).
constexpr int64_t PREFETCH = 16;
template <typename W>
inline void prefetch_chunk(const uint8_t* c) {
  for (int64_t o = 0; o < W::CHUNK; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(c + o), _MM_HINT_T0);
}

inline void prefetch_line(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

// bf16: 8 lanes of a repacked chunk's vector (two bfloat16 each) as the pair's even and odd
// weights, widened exactly.
inline void vbf16_pair(const uint8_t* p, Vec& even, Vec& odd) {
  const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  even = _mm256_castsi256_ps(_mm256_slli_epi32(d, 16));
  odd = _mm256_castsi256_ps(_mm256_and_si256(d, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// bf16's products run in a FlushTiny scope: MXCSR's flush-to-zero (and denormals-are-zero) set,
// so that an fma's result the CPU finds tiny is a zero of its sign, as vdpbf16ps flushes its
// outputs (isa_portable.h's fma_ftz spells the rule out); the caller's MXCSR comes back after.
struct FlushTiny {
  unsigned saved;
  FlushTiny() : saved(_mm_getcsr()) { set(saved | 0x8040u); }
  ~FlushTiny() { set(saved); }
  static void set(unsigned csr) { asm volatile("ldmxcsr %0" : : "m"(csr) : "memory"); }
};
inline Vec vfma_ftz(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }  // in FlushTiny

inline __m256i bcast4(const int8_t* p) {  // 4 activation bytes to every 32-bit lane
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

struct RLanes {
  static constexpr int MAX_M = 4;
  template <int MM, typename W>
  static void tile(const W& w, int64_t t, const XQ& x, float* out) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int h = 0; h < 2; ++h) {
      __m256 acc[MM];
      for (int m = 0; m < MM; ++m) acc[m] = _mm256_setzero_ps();
      for (int64_t b = 0; b < x.nb; ++b) {
        const uint8_t* c = w.chunk(t, b);
        if (h == 0) prefetch_chunk<W>(c + PREFETCH * W::CHUNK);
        if constexpr (std::is_same_v<W, R4>) {
          const __m256i m4 = _mm256_set1_epi8(0x0F);
          __m256i wv[8];
          for (int j = 0; j < 4; ++j) {
            const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + j * 64 + h * 32));
            wv[j] = _mm256_and_si256(v, m4);
            wv[j + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
          }
          const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + 256 + h * 16)));
          const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + 288 + h * 16)));
          for (int m = 0; m < MM; ++m) {
            const int8_t* xq = x.q + m * x.K + b * BLOCK;
            __m256i p = _mm256_maddubs_epi16(wv[0], bcast4(xq));
            for (int g = 1; g < 8; ++g)
              p = _mm256_add_epi16(p, _mm256_maddubs_epi16(wv[g], bcast4(xq + 4 * g)));
            const __m256i i = _mm256_madd_epi16(p, ones);
            const __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(x.d[m * x.nb + b]));
            acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), sc, acc[m]);
            acc[m] = _mm256_fmadd_ps(mw, _mm256_set1_ps(x.s[m * x.nb + b]), acc[m]);
          }
        } else {
          const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
          const __m256 dw = _mm256_loadu_ps(reinterpret_cast<const float*>(c + 512 + h * 32));
          for (int m = 0; m < MM; ++m) {
            const int8_t* xq = x.q + m * x.K + b * BLOCK;
            __m256i i = _mm256_setzero_si256();
            for (int g = 0; g < 8; ++g) {
              const __m256i wq = _mm256_xor_si256(
                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + g * 64 + h * 32)), flip);
              const __m256i p =
                  _mm256_maddubs_epi16(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(bcast4(xq + 4 * g), wq));
              i = _mm256_add_epi32(i, _mm256_madd_epi16(p, ones));
            }
            const __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(x.d[m * x.nb + b]));
            acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), sc, acc[m]);
          }
        }
      }
      for (int m = 0; m < MM; ++m) _mm256_storeu_ps(out + m * TILE + h * 8, acc[m]);
    }
  }
};

// Row ops: Σ a[k]·b[k] over n (a multiple of 8), 16 at a time into two accumulators (dot_parts),
// then finish; finish8 finishes eight such pairs at once, lane p of its result finish(a0[p], a1[p]).
// b: float32, or bfloat16 bits (a cache row), widened exactly by vload.
template <typename T>
inline void dot_parts(const float* a, const T* b, int64_t n, Vec& a0, Vec& a1) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), vload(b + k), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 8), vload(b + k + 8), s1);
  }
  if (k < n) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), vload(b + k), s0);
  a0 = s0;
  a1 = s1;
}

inline float dot(const float* a, const float* b, int64_t n) {
  Vec a0, a1;
  dot_parts(a, b, n, a0, a1);
  return finish(a0, a1);
}

// finish's tree for eight pairs side by side: s_p = a0[p] + a1[p]; the halves of two pairs
// added in one instruction (h_p[j] = s_p[j] + s_p[j + 4]); then h[0] + h[2] and h[1] + h[3] for
// four pairs at once, and their sum; the lanes come out as pairs 0 2 4 6 1 3 5 7, put in order.
inline Vec finish8(const Vec a0[8], const Vec a1[8]) {
  __m256 h[4];
  for (int i = 0; i < 4; ++i) {
    const __m256 s = _mm256_add_ps(a0[2 * i], a1[2 * i]), t = _mm256_add_ps(a0[2 * i + 1], a1[2 * i + 1]);
    h[i] = _mm256_add_ps(_mm256_permute2f128_ps(s, t, 0x20), _mm256_permute2f128_ps(s, t, 0x31));
  }
  __m256 g[2];
  for (int i = 0; i < 2; ++i)
    g[i] = _mm256_add_ps(_mm256_shuffle_ps(h[2 * i], h[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm256_shuffle_ps(h[2 * i], h[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(g[0], g[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(g[0], g[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

}  // namespace specsweep
