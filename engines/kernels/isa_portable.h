// Portable build: the 8-lane primitives every ISA header provides (isa.h lists them), as plain
// C++. An 8-lane vector is a struct; each operation is the vector builds' one, lane by lane, with
// std::fma wherever they fma: the reference the vector builds must equal bit for bit.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <c10/util/Half.h>

#include "contract.h"

#define SPECSWEEP_VEC_REGS 16

namespace specsweep {

struct Vec { float v[8]; };

inline Vec vzero() { return Vec{}; }
inline Vec vload(const float* p) { Vec r; for (int j = 0; j < 8; ++j) r.v[j] = p[j]; return r; }
// eight bfloat16 (their bits) widened to float32: exact, the bits shifted into the high half
inline Vec vload(const uint16_t* p) {
  Vec r;
  for (int j = 0; j < 8; ++j) {
    const uint32_t w = static_cast<uint32_t>(p[j]) << 16;
    std::memcpy(&r.v[j], &w, sizeof w);
  }
  return r;
}
inline Vec vfma(Vec a, Vec b, Vec c) {
  for (int j = 0; j < 8; ++j) c.v[j] = std::fma(a.v[j], b.v[j], c.v[j]);
  return c;
}

inline void vstore(float* p, Vec a) { for (int j = 0; j < 8; ++j) p[j] = a.v[j]; }
inline Vec vset(float x) { Vec r; for (int j = 0; j < 8; ++j) r.v[j] = x; return r; }
inline Vec vmul(Vec a, Vec b) { for (int j = 0; j < 8; ++j) a.v[j] *= b.v[j]; return a; }
inline Vec vadd(Vec a, Vec b) { for (int j = 0; j < 8; ++j) a.v[j] += b.v[j]; return a; }
inline Vec vdiv(Vec a, Vec b) { for (int j = 0; j < 8; ++j) a.v[j] /= b.v[j]; return a; }
inline Vec vclamp(Vec a, float lo, float hi) {  // max(lo, min(a, hi)), as maxps/minps
  for (int j = 0; j < 8; ++j) a.v[j] = std::max(lo, std::min(a.v[j], hi));
  return a;
}
inline Vec vround(Vec a) { for (int j = 0; j < 8; ++j) a.v[j] = std::nearbyint(a.v[j]); return a; }
// 2^n for integral n in [-126, 127] held as floats: the exponent field built directly
inline Vec vpow2(Vec n) {
  for (int j = 0; j < 8; ++j) {
    const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n.v[j]) + 127) << 23;
    std::memcpy(&n.v[j], &bits, 4);
  }
  return n;
}

inline float finish(Vec a0, Vec a1) {
  float s[8];
  for (int j = 0; j < 8; ++j) s[j] = a0.v[j] + a1.v[j];
  float h[4];
  for (int j = 0; j < 4; ++j) h[j] = s[j] + s[j + 4];
  return (h[0] + h[2]) + (h[1] + h[3]);
}

// f32: one block's 32 weights as four vectors, w = fma(q, d, m) (q4) or q·d (q8).
inline void q4_block(const uint8_t* p, float d, float m, Vec w[4]) {
  for (int j = 0; j < 16; ++j) {
    w[j / 8].v[j % 8] = std::fma(static_cast<float>(p[j] & 0x0F), d, m);
    w[2 + j / 8].v[j % 8] = std::fma(static_cast<float>(p[j] >> 4), d, m);
  }
}

inline void q8_block(const int8_t* p, float d, Vec w[4]) {
  for (int j = 0; j < BLOCK; ++j) w[j / 8].v[j % 8] = static_cast<float>(p[j]) * d;
}

// q8a: 32 activations to int8 (`out`), their sum (`sum`); returns the block's scale d.
inline float quantize_block(const float* p, int8_t* out, int32_t& sum) {
  float amax = 0.0f;
  for (int j = 0; j < BLOCK; ++j) amax = std::max(amax, std::fabs(p[j]));
  const float dd = amax / 127.0f;
  const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
  sum = 0;
  for (int j = 0; j < BLOCK; ++j) {
    const int32_t v = static_cast<int32_t>(std::nearbyint(p[j] * id));
    out[j] = static_cast<int8_t>(v);
    sum += v;
  }
  return dd;
}

// q8a: a tile's TILE output rows against MM input rows (contract.h's order), into
// out[m · TILE + r]. The integer sums as plain loops; the float steps as contract.h writes them.

inline float half_to_float(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return static_cast<float>(c10::Half(h, c10::Half::from_bits()));
}

struct RLanes {
  static constexpr int MAX_M = 8;
  template <int MM, typename W>
  static void tile(const W& w, int64_t t, const XQ& x, float* out) {
    float acc[MM][TILE] = {};
    int32_t qw[TILE][BLOCK];
    for (int64_t b = 0; b < x.nb; ++b) {
      const uint8_t* c = w.chunk(t, b);
      for (int r = 0; r < TILE; ++r)
        for (int j = 0; j < 4; ++j)
          for (int k = 0; k < 4; ++k) {
            if constexpr (std::is_same_v<W, R4>) {
              const uint8_t v = c[j * 64 + r * 4 + k];
              qw[r][4 * j + k] = v & 0x0F;
              qw[r][16 + 4 * j + k] = v >> 4;
            } else {
              qw[r][4 * j + k] = static_cast<int32_t>(c[j * 64 + r * 4 + k]) - 128;
              qw[r][16 + 4 * j + k] = static_cast<int32_t>(c[(j + 4) * 64 + r * 4 + k]) - 128;
            }
          }
      for (int m = 0; m < MM; ++m) {
        const int8_t* xq = x.q + m * x.K + b * BLOCK;
        const float dx = x.d[m * x.nb + b], s = x.s[m * x.nb + b];
        for (int r = 0; r < TILE; ++r) {
          int32_t i = 0;
          for (int j = 0; j < BLOCK; ++j) i += qw[r][j] * xq[j];
          if constexpr (std::is_same_v<W, R4>) {
            const float dw = half_to_float(c + 256 + 2 * r), mw = half_to_float(c + 288 + 2 * r);
            acc[m][r] = std::fma(static_cast<float>(i), dw * dx, acc[m][r]);
            acc[m][r] = std::fma(mw, s, acc[m][r]);
          } else {
            float dw;
            std::memcpy(&dw, c + 512 + 4 * r, 4);
            acc[m][r] = std::fma(static_cast<float>(i), dw * dx, acc[m][r]);
          }
        }
      }
    }
    for (int m = 0; m < MM; ++m)
      for (int r = 0; r < TILE; ++r) out[m * TILE + r] = acc[m][r];
  }
};

// bf16: vector p of a repacked chunk's 8 lanes (4 bytes each: two bfloat16) as the pair's even
// and odd weights, widened exactly.
inline void vbf16_pair(const uint8_t* p, Vec& even, Vec& odd) {
  for (int j = 0; j < 8; ++j) {
    uint32_t d;
    std::memcpy(&d, p + 4 * j, 4);
    const uint32_t e = d << 16, o = d & 0xFFFF0000u;
    std::memcpy(&even.v[j], &e, 4);
    std::memcpy(&odd.v[j], &o, 4);
  }
}

// fma(a, b, c) rounded once to nearest even, then a zero of its sign where the result, rounded
// as if the exponent were unbounded, is below the smallest normal float: the flush of x86's FTZ
// and of vdpbf16ps (a sum that rounds to exactly the smallest normal only through the subnormal
// grid is still flushed). a and b are bfloat16 values, so a·b is exact in a double; s + e is
// a·b + c exactly (two-sum); s rounded to float is the true rounding except where s is a
// midpoint between two floats and e ≠ 0, which e decides. A tiny sum is scaled by 2^64 first
// (exact), so that its rounding is a normal float's.
inline float fma_ftz(float a, float b, float c) {
  const double p = static_cast<double>(a) * static_cast<double>(b), dc = c;
  const double s = p + dc;
  if (!std::isfinite(p) || !std::isfinite(c)) return static_cast<float>(s);
  const double bb = s - p, e = (p - (s - bb)) + (dc - bb);
  const bool tiny = std::fabs(s) < 0x1p-100;
  const double ss = tiny ? s * 0x1p64 : s, ee = tiny ? e * 0x1p64 : e;
  float r = static_cast<float>(ss);
  if (ee != 0) {
    if (std::isinf(r)) {  // at the overflow midpoint, a true value below it is the largest float
      if (std::fabs(ss) == 0x1.ffffffp127 && (ee < 0) == (ss > 0)) r = std::copysign(0x1.fffffep127f, r);
    } else if (ss != static_cast<double>(r)) {
      const float other = std::nextafter(r, ss > r ? INFINITY : -INFINITY);
      const bool mid = ss == (static_cast<double>(r) + static_cast<double>(other)) / 2;
      if (mid && (ee > 0) == (ss > r)) r = other;
    }
  }
  if (tiny) {
    if (std::fabs(r) < 0x1p-62f) return std::copysign(0.0f, r);
    return static_cast<float>(static_cast<double>(r) * 0x1p-64);
  }
  return r;
}

inline Vec vfma_ftz(Vec a, Vec b, Vec c) {
  for (int j = 0; j < 8; ++j) c.v[j] = fma_ftz(a.v[j], b.v[j], c.v[j]);
  return c;
}

// The scope of bf16's products; the vector builds set the CPU's flush of tiny results in it.
struct FlushTiny {};
inline void prefetch_line(const void*) {}

// Row ops: Σ a[k]·b[k] over n (a multiple of 8), 16 at a time into two accumulators (dot_parts),
// then finish; finish8 finishes eight such pairs at once, lane p of its result finish(a0[p], a1[p]).
// b: float32, or bfloat16 bits (a cache row), widened exactly by vload.
template <typename T>
inline void dot_parts(const float* a, const T* b, int64_t n, Vec& a0, Vec& a1) {
  a0 = vzero();
  a1 = vzero();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    a0 = vfma(vload(a + k), vload(b + k), a0);
    a1 = vfma(vload(a + k + 8), vload(b + k + 8), a1);
  }
  if (k < n) a0 = vfma(vload(a + k), vload(b + k), a0);
}

inline float dot(const float* a, const float* b, int64_t n) {
  Vec a0, a1;
  dot_parts(a, b, n, a0, a1);
  return finish(a0, a1);
}

inline Vec finish8(const Vec a0[8], const Vec a1[8]) {
  Vec r;
  for (int p = 0; p < 8; ++p) r.v[p] = finish(a0[p], a1[p]);
  return r;
}

}  // namespace specsweep
