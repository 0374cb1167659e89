// Portable build: the 8-lane primitives every ISA header provides (isa.h lists them), as plain
// C++. An 8-lane vector is a struct; each operation is the vector builds' one, lane by lane, with
// std::fma wherever they fma: the reference the vector builds must equal bit for bit.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "contract.h"

namespace specsweep {

struct Vec { float v[8]; };

inline Vec vzero() { return Vec{}; }
inline Vec vload(const float* p) { Vec r; for (int j = 0; j < 8; ++j) r.v[j] = p[j]; return r; }
inline Vec vfma(Vec a, Vec b, Vec c) {
  for (int j = 0; j < 8; ++j) c.v[j] = std::fma(a.v[j], b.v[j], c.v[j]);
  return c;
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

// q8a: block b of weight row n against MM input rows, into a[b & 1][m].
template <int MM, typename W>
inline void q8a_block(const W& w, int64_t n, int64_t b, const XQ& x, Vec a[2][MM]) {
  const int64_t nb = x.nb;
  int32_t qw[BLOCK];
  if constexpr (std::is_same_v<W, Q4>) {
    const uint8_t* p = w.nib + n * (w.K / 2) + b * 16;
    for (int j = 0; j < 16; ++j) { qw[j] = p[j] & 0x0F; qw[16 + j] = p[j] >> 4; }
  } else {
    for (int j = 0; j < BLOCK; ++j) qw[j] = w.q[n * w.K + b * BLOCK + j];
  }
  const float dw = w.scale[n * nb + b];
  for (int m = 0; m < MM; ++m) {
    const int8_t* xq = x.q + m * x.K + b * BLOCK;
    const float sc = dw * x.d[m * nb + b];
    for (int i = 0; i < 8; ++i) {
      int32_t is = 0;
      for (int j = 4 * i; j < 4 * i + 4; ++j) is += qw[j] * xq[j];
      a[b & 1][m].v[i] = std::fma(static_cast<float>(is), sc, a[b & 1][m].v[i]);
    }
  }
}

// Row ops: Σ a[k]·b[k] over n (a multiple of 8), 16 at a time into two accumulators, then finish.
inline float dot(const float* a, const float* b, int64_t n) {
  float s[2][8] = {};
  int64_t k = 0;
  for (; k + 16 <= n; k += 16)
    for (int j = 0; j < 8; ++j) {
      s[0][j] = std::fma(a[k + j], b[k + j], s[0][j]);
      s[1][j] = std::fma(a[k + 8 + j], b[k + 8 + j], s[1][j]);
    }
  if (k < n)
    for (int j = 0; j < 8; ++j) s[0][j] = std::fma(a[k + j], b[k + j], s[0][j]);
  Vec a0, a1;
  for (int j = 0; j < 8; ++j) { a0.v[j] = s[0][j]; a1.v[j] = s[1][j]; }
  return finish(a0, a1);
}

}  // namespace specsweep
