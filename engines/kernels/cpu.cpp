// Weight-only block-quantized matrix products for the CPU: y = x · Wᵀ, x and y float32.
//
// Two block formats, 32 weights per block along the input dimension K:
//   q4   nib (N, K/2) uint8: byte j of block b holds q[b·32 + j] (low nibble) and
//        q[b·32 + 16 + j] (high nibble) — GGUF's Q4_1 order;  w = scale·q + offset, q ∈ 0..15
//   q8   q (N, K) int8;                                        w = scale·q
// with scale, offset (N, K/32) float32. The embedded model's Q4_1 and Q8_0 blocks are these
// formats with their f16 scales widened exactly, so the weights are the shipped ones.
//
// Work split: threads take tiles of ROWS output rows. Input rows go in chunks of up to MAX_M:
// each block of weights is expanded into registers once per chunk and used for every row of
// it, with the chunk's accumulators in registers (the chunk size is a template parameter).
// Every y[m, n] is the same operations in the same order (`acc_block` per block, then one fixed
// final sum) whatever the chunk, so a row's result does not depend on how many rows the call
// has: a verify forward over q tokens gives each token the numbers a one-token forward gives.
//
// Built with AVX-512 the products run two 8-lane halves per instruction (`fused_wide`): the
// same fmas in the same order, so the results equal the AVX2 build's bit for bit (the tests
// build both and compare), with up to 12 input rows per chunk (32 vector registers) and, for small
// chunks, several output rows in flight so that their accumulator chains hide the fma latency.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <cstdint>
#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define SPECSWEEP_AVX2 1
#if defined(__AVX512F__)
#define SPECSWEEP_AVX512 1
#endif
#endif

namespace {

constexpr int64_t ROWS = 4;     // output rows per tile
constexpr int64_t BLOCK = 32;   // weights per quantization block
constexpr int64_t MAX_M = 8;    // input rows sharing one expansion of a block

#ifdef SPECSWEEP_AVX2
using Vec = __m256;

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
#else
// Portable build: an 8-lane vector as a plain struct, the same order of operations.
struct Vec { float v[8]; };

inline void q4_block(const uint8_t* p, float d, float m, Vec w[4]) {
  for (int j = 0; j < 16; ++j) {
    w[j / 8].v[j % 8] = std::fma(static_cast<float>(p[j] & 0x0F), d, m);
    w[2 + j / 8].v[j % 8] = std::fma(static_cast<float>(p[j] >> 4), d, m);
  }
}

inline void q8_block(const int8_t* p, float d, Vec w[4]) {
  for (int j = 0; j < BLOCK; ++j) w[j / 8].v[j % 8] = static_cast<float>(p[j]) * d;
}

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
#endif

// The one accumulation order for y[m, n] = Σ_k w[k] x[k], per block of 32:
//   a0 += w[0:8]·x[0:8];  a1 += w[8:16]·x[8:16];  a0 += w[16:24]·x[16:24];  a1 += w[24:32]·x[24:32]
// and finally y = Σ lanes of (a0 + a1) in a fixed tree (`finish`).
inline void acc_block(const Vec w[4], const float* x, Vec& a0, Vec& a1) {
  a0 = vfma(w[0], vload(x), a0);
  a1 = vfma(w[1], vload(x + 8), a1);
  a0 = vfma(w[2], vload(x + 16), a0);
  a1 = vfma(w[3], vload(x + 24), a1);
}

// Block readers: block b of output row n into four vectors.
struct Q4 {
  const uint8_t* nib; const float* scale; const float* offset; int64_t K;
  void operator()(int64_t n, int64_t b, Vec w[4]) const {
    const int64_t nb = K / BLOCK;
    q4_block(nib + n * (K / 2) + b * 16, scale[n * nb + b], offset[n * nb + b], w);
  }
};

struct Q8 {
  const int8_t* q; const float* scale; int64_t K;
  void operator()(int64_t n, int64_t b, Vec w[4]) const {
    q8_block(q + n * K + b * BLOCK, scale[n * (K / BLOCK) + b], w);
  }
};

#ifdef SPECSWEEP_AVX512
// A block as two 16-lane vectors: wide[0] = [w[0] | w[1]], wide[1] = [w[2] | w[3]], each lane
// computed exactly as q4_block / q8_block compute it.
using Wide = __m512;

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

// acc = [a0 | a1]: the two fmas below are acc_block's four.
inline float finish_wide(Wide a) {
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
  return finish(_mm512_castps512_ps256(a), hi);
}

// MM input rows × RR output rows from n0, every accumulator in a register: per block, the RR
// rows' weights are expanded first, then each input row's 32 values are loaded once for all RR.
template <int MM, int RR, typename Block>
void fused_wide(const Block& blk, int64_t n0, const float* x, int64_t K, float* y, int64_t N) {
  const int64_t nb = K / BLOCK;
  Wide acc[RR][MM];
  for (int r = 0; r < RR; ++r)
    for (int m = 0; m < MM; ++m) acc[r][m] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    Wide w[RR][2];
    for (int r = 0; r < RR; ++r) wide_block(blk, n0 + r, b, w[r]);
    for (int m = 0; m < MM; ++m) {
      const float* xm = x + m * K + b * BLOCK;
      const Wide x0 = _mm512_loadu_ps(xm), x1 = _mm512_loadu_ps(xm + 16);
      for (int r = 0; r < RR; ++r) {
        acc[r][m] = _mm512_fmadd_ps(w[r][0], x0, acc[r][m]);
        acc[r][m] = _mm512_fmadd_ps(w[r][1], x1, acc[r][m]);
      }
    }
  }
  for (int r = 0; r < RR; ++r)
    for (int m = 0; m < MM; ++m) y[m * N + n0 + r] = finish_wide(acc[r][m]);
}

// Output rows in groups of RR (fewer input rows: more output rows in flight), then singly.
template <int MM, typename Block>
void rows_wide(const Block& blk, int64_t n0, int64_t rows, const float* x, int64_t K, float* y,
               int64_t N) {
  constexpr int RR = MM <= 4 ? 4 : MM <= 8 ? 2 : 1;
  int64_t r = 0;
  for (; r + RR <= rows; r += RR) fused_wide<MM, RR>(blk, n0 + r, x, K, y, N);
  for (; r < rows; ++r) fused_wide<MM, 1>(blk, n0 + r, x, K, y, N);
}

constexpr int64_t MAX_M_WIDE = 12;  // 16 rows ran slower than 12 + 4 here (register pressure)
#endif

// Small M, known at compile time so that the accumulators live in registers.
template <int MM, typename Block>
void fused(const Block& blk, int64_t n0, int64_t rows, const float* x, int64_t K, float* y,
           int64_t N) {
  const int64_t nb = K / BLOCK;
  Vec w[4];
  for (int64_t r = 0; r < rows; ++r) {
    Vec a0[MM], a1[MM];
    for (int m = 0; m < MM; ++m) a0[m] = a1[m] = vzero();
    for (int64_t b = 0; b < nb; ++b) {
      blk(n0 + r, b, w);
      for (int m = 0; m < MM; ++m) acc_block(w, x + m * K + b * BLOCK, a0[m], a1[m]);
    }
    for (int m = 0; m < MM; ++m) y[m * N + n0 + r] = finish(a0[m], a1[m]);
  }
}

// Input rows in chunks of up to 8: each chunk expands the tile's blocks into registers once.
template <typename Block>
void tile(const Block& blk, int64_t n0, int64_t rows, const float* x, int64_t M, int64_t K,
          float* y, int64_t N) {
#ifdef SPECSWEEP_AVX512
  for (int64_t m0 = 0; m0 < M; m0 += MAX_M_WIDE) {
    const float* xc = x + m0 * K;
    float* yc = y + m0 * N;
    switch (std::min(MAX_M_WIDE, M - m0)) {
      case 1: rows_wide<1>(blk, n0, rows, xc, K, yc, N); break;
      case 2: rows_wide<2>(blk, n0, rows, xc, K, yc, N); break;
      case 3: rows_wide<3>(blk, n0, rows, xc, K, yc, N); break;
      case 4: rows_wide<4>(blk, n0, rows, xc, K, yc, N); break;
      case 5: rows_wide<5>(blk, n0, rows, xc, K, yc, N); break;
      case 6: rows_wide<6>(blk, n0, rows, xc, K, yc, N); break;
      case 7: rows_wide<7>(blk, n0, rows, xc, K, yc, N); break;
      case 8: rows_wide<8>(blk, n0, rows, xc, K, yc, N); break;
      case 9: rows_wide<9>(blk, n0, rows, xc, K, yc, N); break;
      case 10: rows_wide<10>(blk, n0, rows, xc, K, yc, N); break;
      case 11: rows_wide<11>(blk, n0, rows, xc, K, yc, N); break;
      default: rows_wide<12>(blk, n0, rows, xc, K, yc, N); break;
    }
  }
#else
  for (int64_t m0 = 0; m0 < M; m0 += MAX_M) {
    const float* xc = x + m0 * K;
    float* yc = y + m0 * N;
    switch (std::min(MAX_M, M - m0)) {
      case 1: fused<1>(blk, n0, rows, xc, K, yc, N); break;
      case 2: fused<2>(blk, n0, rows, xc, K, yc, N); break;
      case 3: fused<3>(blk, n0, rows, xc, K, yc, N); break;
      case 4: fused<4>(blk, n0, rows, xc, K, yc, N); break;
      case 5: fused<5>(blk, n0, rows, xc, K, yc, N); break;
      case 6: fused<6>(blk, n0, rows, xc, K, yc, N); break;
      case 7: fused<7>(blk, n0, rows, xc, K, yc, N); break;
      default: fused<8>(blk, n0, rows, xc, K, yc, N); break;
    }
  }
#endif
}

template <typename Block>
torch::Tensor run(const Block& blk, const torch::Tensor& x, int64_t N, int64_t K) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
              "x must be a contiguous float32 (M, K) tensor");
  TORCH_CHECK(x.size(1) == K && K % BLOCK == 0, "x's K must match the weights and divide by 32");
  const int64_t M = x.size(0);
  auto y = torch::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t tiles = (N + ROWS - 1) / ROWS;
  at::parallel_for(0, tiles, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n0 = t * ROWS;
      tile(blk, n0, std::min(ROWS, N - n0), xp, M, K, yp, N);
    }
  });
  return y;
}

void check_scale(const torch::Tensor& s, int64_t N, int64_t K) {
  TORCH_CHECK(s.scalar_type() == torch::kFloat32 && s.is_contiguous() && s.dim() == 2 &&
              s.size(0) == N && s.size(1) == K / BLOCK, "scales: contiguous float32 (N, K/32)");
}

}  // namespace

torch::Tensor q4_linear(torch::Tensor x, torch::Tensor nib, torch::Tensor scale,
                        torch::Tensor offset) {
  TORCH_CHECK(nib.scalar_type() == torch::kUInt8 && nib.is_contiguous() && nib.dim() == 2,
              "nib: contiguous uint8 (N, K/2)");
  const int64_t N = nib.size(0), K = nib.size(1) * 2;
  check_scale(scale, N, K);
  check_scale(offset, N, K);
  return run(Q4{nib.data_ptr<uint8_t>(), scale.data_ptr<float>(), offset.data_ptr<float>(), K},
             x, N, K);
}

torch::Tensor q8_linear(torch::Tensor x, torch::Tensor q, torch::Tensor scale) {
  TORCH_CHECK(q.scalar_type() == torch::kInt8 && q.is_contiguous() && q.dim() == 2,
              "q: contiguous int8 (N, K)");
  const int64_t N = q.size(0), K = q.size(1);
  check_scale(scale, N, K);
  return run(Q8{q.data_ptr<int8_t>(), scale.data_ptr<float>(), K}, x, N, K);
}

// ---- int8 activations (model.kernel=native_q8a) --------------------------------------------
// llama.cpp's scheme: each input row is quantized per block of 32, d = amax/127,
// q = round(x/d) (to nearest, ties to even), s = d·Σq; then per block the weights' integers and
// the activations' multiply as integers and are scaled once:
//   q4:  y = Σ_b dw·dx·Σ_j qw_j·qx_j + Σ_b mw·s        (w = dw·qw + mw, qw ∈ 0..15)
//   q8:  y = Σ_b dw·dx·Σ_j qw_j·qx_j                   (w = dw·qw, qw int8)
// Different numbers from the float32-activation kernels above (hence its own kernel value), and
// again one fixed order per y[m, n] whatever the number of rows: lane i of a block's integer sum
// holds its bytes 4i..4i+3, even blocks accumulate into a0 and odd ones into a1 (AVX-512: the
// low and high halves of one register, two blocks per instruction), y = finish(a0, a1) + the
// offsets' sum taken block by block. The AVX2, AVX-512 and portable builds give the same bits.

namespace {

struct XQ {  // the quantized input rows
  const int8_t* q; const float* d; const float* s; const float* d8; int64_t K, nb;
};

// d8: each block's d repeated 8 times (the AVX-512 products read two blocks' scales at once).
// The vector and scalar paths give the same bytes: |x|'s maximum, one division, x·(1/d) rounded
// to nearest even (the default rounding of cvtps_epi32 and of nearbyint).
void quantize_rows(const float* x, int64_t M, int64_t K, int8_t* q, float* d, float* s,
                   float* d8) {
  const int64_t nb = K / BLOCK;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < nb; ++b) {
      const float* p = x + m * K + b * BLOCK;
      int8_t* out = q + m * K + b * BLOCK;
#ifdef SPECSWEEP_AVX2
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
      const int32_t sum = _mm_cvtsi128_si32(t);
      // packs interleave the 128-bit lanes; the permutation puts the 32 bytes back in order
      const __m256i b16 =
          _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3]));
      const __m256i bytes =
          _mm256_permutevar8x32_epi32(b16, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), bytes);
#else
      float amax = 0.0f;
      for (int j = 0; j < BLOCK; ++j) amax = std::max(amax, std::fabs(p[j]));
      const float dd = amax / 127.0f;
      const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
      int32_t sum = 0;
      for (int j = 0; j < BLOCK; ++j) {
        const int32_t v = static_cast<int32_t>(std::nearbyint(p[j] * id));
        out[j] = static_cast<int8_t>(v);
        sum += v;
      }
#endif
      d[m * nb + b] = dd;
      s[m * nb + b] = dd * static_cast<float>(sum);
      for (int j = 0; j < 8; ++j) d8[(m * nb + b) * 8 + j] = dd;
    }
}

// Per block: 8 lanes of integer sums (lane i: bytes 4i..4i+3), scaled and accumulated.
#ifdef SPECSWEEP_AVX2
inline __m256i q4_bytes(const Q4& w, int64_t n, int64_t b) {  // 32 weights, natural order
  const __m128i bytes =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.nib + n * (w.K / 2) + b * 16));
  const __m128i lo = _mm_and_si128(bytes, _mm_set1_epi8(0x0F));
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(0x0F));
  return _mm256_set_m128i(hi, lo);
}

// One block of row n against MM input rows; `odd` picks the accumulator.
template <int MM, typename W>
inline void q8a_block(const W& w, int64_t n, int64_t b, const XQ& x, __m256 a[2][MM]) {
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
#else
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
#endif

// The offsets' sum for row n, block by block (q4 only).
template <typename W>
inline float q8a_offsets(const W& w, int64_t n, const XQ& x, int m) {
  if constexpr (std::is_same_v<W, Q4>) {
    float o = 0.0f;
    for (int64_t b = 0; b < x.nb; ++b)
      o = std::fma(w.offset[n * x.nb + b], x.s[m * x.nb + b], o);
    return o;
  } else {
    return 0.0f;
  }
}

template <int MM, typename W>
void q8a_fused(const W& w, int64_t n0, int64_t rows, const XQ& x, float* y, int64_t N) {
  for (int64_t r = 0; r < rows; ++r) {
    Vec a[2][MM];
    for (int m = 0; m < MM; ++m) a[0][m] = a[1][m] = vzero();
    for (int64_t b = 0; b < x.nb; ++b) q8a_block<MM>(w, n0 + r, b, x, a);
    for (int m = 0; m < MM; ++m)
      y[m * N + n0 + r] = finish(a[0][m], a[1][m]) + q8a_offsets(w, n0 + r, x, m);
  }
}

#if defined(SPECSWEEP_AVX512) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define SPECSWEEP_VNNI 1
// Two blocks per instruction: lanes 0-7 block b (a0), lanes 8-15 block b + 1 (a1).
inline __m512 pair_scale(const float* p) {  // [p[0] ×8 | p[1] ×8]
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(p[0])),
                                             _mm256_castps_pd(_mm256_set1_ps(p[1])), 1));
}

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
        neg = _mm512_movepi8_mask(wq);
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

template <int MM, typename W>
void q8a_rows_wide(const W& w, int64_t n0, int64_t rows, const XQ& x, float* y, int64_t N) {
  constexpr int RR = MM <= 4 ? 4 : MM <= 8 ? 2 : 1;
  int64_t r = 0;
  for (; r + RR <= rows; r += RR) q8a_wide<MM, RR>(w, n0 + r, x, y, N);
  for (; r < rows; ++r) q8a_wide<MM, 1>(w, n0 + r, x, y, N);
}
#endif

XQ chunk(const XQ& x, int64_t m0) {
  return XQ{x.q + m0 * x.K, x.d + m0 * x.nb, x.s + m0 * x.nb, x.d8 + m0 * x.nb * 8, x.K, x.nb};
}

template <typename W>
void q8a_tile(const W& w, int64_t n0, int64_t rows, const XQ& x, int64_t M, float* y,
              int64_t N) {
#ifdef SPECSWEEP_VNNI
  if (x.nb % 2 == 0) {
    for (int64_t m0 = 0; m0 < M; m0 += MAX_M_WIDE) {
      const XQ xc = chunk(x, m0);
      float* yc = y + m0 * N;
      switch (std::min(MAX_M_WIDE, M - m0)) {
        case 1: q8a_rows_wide<1>(w, n0, rows, xc, yc, N); break;
        case 2: q8a_rows_wide<2>(w, n0, rows, xc, yc, N); break;
        case 3: q8a_rows_wide<3>(w, n0, rows, xc, yc, N); break;
        case 4: q8a_rows_wide<4>(w, n0, rows, xc, yc, N); break;
        case 5: q8a_rows_wide<5>(w, n0, rows, xc, yc, N); break;
        case 6: q8a_rows_wide<6>(w, n0, rows, xc, yc, N); break;
        case 7: q8a_rows_wide<7>(w, n0, rows, xc, yc, N); break;
        case 8: q8a_rows_wide<8>(w, n0, rows, xc, yc, N); break;
        case 9: q8a_rows_wide<9>(w, n0, rows, xc, yc, N); break;
        case 10: q8a_rows_wide<10>(w, n0, rows, xc, yc, N); break;
        case 11: q8a_rows_wide<11>(w, n0, rows, xc, yc, N); break;
        default: q8a_rows_wide<12>(w, n0, rows, xc, yc, N); break;
      }
    }
    return;
  }
#endif
  for (int64_t m0 = 0; m0 < M; m0 += MAX_M) {
    const XQ xc = chunk(x, m0);
    float* yc = y + m0 * N;
    switch (std::min(MAX_M, M - m0)) {
      case 1: q8a_fused<1>(w, n0, rows, xc, yc, N); break;
      case 2: q8a_fused<2>(w, n0, rows, xc, yc, N); break;
      case 3: q8a_fused<3>(w, n0, rows, xc, yc, N); break;
      case 4: q8a_fused<4>(w, n0, rows, xc, yc, N); break;
      case 5: q8a_fused<5>(w, n0, rows, xc, yc, N); break;
      case 6: q8a_fused<6>(w, n0, rows, xc, yc, N); break;
      case 7: q8a_fused<7>(w, n0, rows, xc, yc, N); break;
      default: q8a_fused<8>(w, n0, rows, xc, yc, N); break;
    }
  }
}

template <typename W>
torch::Tensor run_q8a(const W& w, const torch::Tensor& x, int64_t N, int64_t K) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
              "x must be a contiguous float32 (M, K) tensor");
  TORCH_CHECK(x.size(1) == K && K % BLOCK == 0, "x's K must match the weights and divide by 32");
  const int64_t M = x.size(0), nb = K / BLOCK;
  // the quantized rows, in buffers kept from call to call (no allocation once grown)
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> d, s, d8;
  q.resize(M * K);
  d.resize(M * nb);
  s.resize(M * nb);
  d8.resize(M * nb * 8);
  quantize_rows(x.data_ptr<float>(), M, K, q.data(), d.data(), s.data(), d8.data());
  const XQ xq{q.data(), d.data(), s.data(), d8.data(), K, nb};
  auto y = torch::empty({M, N}, x.options());
  float* yp = y.data_ptr<float>();
  const int64_t tiles = (N + ROWS - 1) / ROWS;
  at::parallel_for(0, tiles, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n0 = t * ROWS;
      q8a_tile(w, n0, std::min(ROWS, N - n0), xq, M, yp, N);
    }
  });
  return y;
}

}  // namespace

torch::Tensor q4_linear_q8a(torch::Tensor x, torch::Tensor nib, torch::Tensor scale,
                            torch::Tensor offset) {
  TORCH_CHECK(nib.scalar_type() == torch::kUInt8 && nib.is_contiguous() && nib.dim() == 2,
              "nib: contiguous uint8 (N, K/2)");
  const int64_t N = nib.size(0), K = nib.size(1) * 2;
  check_scale(scale, N, K);
  check_scale(offset, N, K);
  return run_q8a(
      Q4{nib.data_ptr<uint8_t>(), scale.data_ptr<float>(), offset.data_ptr<float>(), K}, x, N, K);
}

torch::Tensor q8_linear_q8a(torch::Tensor x, torch::Tensor q, torch::Tensor scale) {
  TORCH_CHECK(q.scalar_type() == torch::kInt8 && q.is_contiguous() && q.dim() == 2,
              "q: contiguous int8 (N, K)");
  const int64_t N = q.size(0), K = q.size(1);
  check_scale(scale, N, K);
  return run_q8a(Q8{q.data_ptr<int8_t>(), scale.data_ptr<float>(), K}, x, N, K);
}

// The input rows as native_q8a quantizes them: (q int8 (M, K), d (M, K/32), s (M, K/32)).
std::vector<torch::Tensor> quantize_q8a(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
              "x must be a contiguous float32 (M, K) tensor");
  const int64_t M = x.size(0), K = x.size(1), nb = K / BLOCK;
  TORCH_CHECK(K % BLOCK == 0, "x's K must divide by 32");
  auto q = torch::empty({M, K}, x.options().dtype(torch::kInt8));
  auto d = torch::empty({M, nb}, x.options());
  auto s = torch::empty({M, nb}, x.options());
  std::vector<float> d8(M * nb * 8);
  quantize_rows(x.data_ptr<float>(), M, K, q.data_ptr<int8_t>(), d.data_ptr<float>(),
                s.data_ptr<float>(), d8.data());
  return {q, d, s};
}

// ---- per-row layer ops (one thread each: these tensors are a few KB) -----------------------
// Each output row depends only on its own input row, with a fixed order of operations, as
// for the matrix products above. They replace chains of small torch ops (an RMS norm is six,
// each with its dispatch and threading overhead: ~35 µs for 576 values on two cores).

namespace {

inline void check_rows(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.scalar_type() == torch::kFloat32 && t.is_contiguous() && t.device().is_cpu(),
              name, " must be a contiguous float32 CPU tensor");
}

// Σ a[k]·b[k] over n (a multiple of 8) in a fixed order.
inline float dot(const float* a, const float* b, int64_t n) {
#ifdef SPECSWEEP_AVX2
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 8), _mm256_loadu_ps(b + k + 8), s1);
  }
  if (k < n) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), s0);
  return finish(s0, s1);
#else
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
#endif
}

inline void norm_row(const float* x, const float* w, float* y, int64_t H, float eps) {
  const float inv = 1.0f / std::sqrt(dot(x, x, H) / static_cast<float>(H) + eps);
  for (int64_t k = 0; k < H; ++k) y[k] = w[k] * (x[k] * inv);
}

}  // namespace

// y = w · x / sqrt(mean(x²) + eps), row by row; x (R, H), H a multiple of 8.
torch::Tensor rms_norm(torch::Tensor x, torch::Tensor w, double eps) {
  check_rows(x, "x");
  check_rows(w, "w");
  const int64_t H = x.size(-1), R = x.numel() / H;
  TORCH_CHECK(H % 8 == 0 && w.numel() == H, "rms_norm: H must divide by 8 and match w");
  auto y = torch::empty_like(x);
  for (int64_t r = 0; r < R; ++r)
    norm_row(x.data_ptr<float>() + r * H, w.data_ptr<float>(), y.data_ptr<float>() + r * H, H,
             static_cast<float>(eps));
  return y;
}

// x += r in place (the residual stream); returns rms_norm(x).
torch::Tensor add_rms_norm_(torch::Tensor x, torch::Tensor r, torch::Tensor w, double eps) {
  check_rows(x, "x");
  check_rows(r, "r");
  TORCH_CHECK(x.numel() == r.numel(), "add_rms_norm_: x and r differ in size");
  const int64_t n = x.numel();
  float* xp = x.data_ptr<float>();
  const float* rp = r.data_ptr<float>();
  for (int64_t k = 0; k < n; ++k) xp[k] += rp[k];
  return rms_norm(x, w, eps);
}

// Rotary in place on the first `heads` heads of each row: x (R, width) holding heads of hd
// values from its start (q and k of a fused projection), cos/sin (R, hd), sin carrying
// rotate_half's sign: x ← x·cos + roll(x, hd/2)·sin.
void rope_(torch::Tensor x, int64_t heads, int64_t hd, torch::Tensor cos, torch::Tensor sin) {
  check_rows(x, "x");
  check_rows(cos, "cos");
  check_rows(sin, "sin");
  const int64_t width = x.size(-1), R = x.numel() / width, half = hd / 2;
  TORCH_CHECK(heads * hd <= width && cos.numel() == R * hd, "rope_: bad shapes");
  float* xp = x.data_ptr<float>();
  std::vector<float> t(hd);
  for (int64_t r = 0; r < R; ++r) {
    const float* c = cos.data_ptr<float>() + r * hd;
    const float* s = sin.data_ptr<float>() + r * hd;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = xp + r * width + h * hd;
      for (int64_t k = 0; k < hd; ++k) t[k] = v[k];
      for (int64_t k = 0; k < hd; ++k) v[k] = t[k] * c[k] + t[(k + half) % hd] * s[k];
    }
  }
}

// ---- one decoder layer in one call ------------------------------------------------------
// engines/lean.py's Block.forward_native, op for op and in its order (the same kernels above and
// the same ATen attention), for batch 1 without biases: its numbers are forward_native's bit for
// bit, without the Python between the ops (tests/test_engines.py compares the two).

namespace {

// A projection's tensors: {nib, scale, offset} for q4 blocks, {q, scale} for q8.
torch::Tensor project(const torch::Tensor& x, const std::vector<torch::Tensor>& w, bool q8a) {
  if (q8a) return w.size() == 3 ? q4_linear_q8a(x, w[0], w[1], w[2]) : q8_linear_q8a(x, w[0], w[1]);
  return w.size() == 3 ? q4_linear(x, w[0], w[1], w[2]) : q8_linear(x, w[0], w[1]);
}

}  // namespace

// x (n, H) the residual stream, updated in place; kc, vc (1, kv, cap, hd) this layer's cache,
// positions [start, start + n) written; cos, sin (n, hd); mask (1, 1, n, start + n) or none.
void layer_(torch::Tensor x, torch::Tensor norm_in, torch::Tensor norm_post,
            std::vector<torch::Tensor> wqkv, std::vector<torch::Tensor> wo,
            std::vector<torch::Tensor> wgu, std::vector<torch::Tensor> wd, torch::Tensor kc,
            torch::Tensor vc, int64_t start, torch::Tensor cos, torch::Tensor sin,
            c10::optional<torch::Tensor> mask, int64_t nh, int64_t nkv, int64_t hd, double eps,
            bool q8a) {
  const int64_t n = x.size(0);
  auto qkv = project(rms_norm(x, norm_in, eps), wqkv, q8a);  // (n, (nh + 2 nkv) hd)
  rope_(qkv, nh + nkv, hd, cos, sin);
  kc.select(0, 0).slice(1, start, start + n).copy_(
      qkv.slice(1, nh * hd, (nh + nkv) * hd).view({n, nkv, hd}).transpose(0, 1));
  vc.select(0, 0).slice(1, start, start + n).copy_(
      qkv.slice(1, (nh + nkv) * hd).view({n, nkv, hd}).transpose(0, 1));
  auto q = qkv.slice(1, 0, nh * hd).view({1, n, nh, hd}).transpose(1, 2);
  auto o = at::scaled_dot_product_attention(q, kc.slice(2, 0, start + n),
                                            vc.slice(2, 0, start + n), mask, 0.0, false,
                                            c10::nullopt, nh != nkv);
  auto h = add_rms_norm_(x, project(o.transpose(1, 2).reshape({n, nh * hd}), wo, q8a), norm_post, eps);
  auto gu = project(h, wgu, q8a).chunk(2, -1);
  x.add_(project(at::silu(gu[0]) * gu[1], wd, q8a));
}

bool vectorized() {
#ifdef SPECSWEEP_AVX2
  return true;
#else
  return false;
#endif
}

std::string isa() {
#if defined(SPECSWEEP_VNNI)
  return "avx512+vnni";
#elif defined(SPECSWEEP_AVX512)
  return "avx512";
#elif defined(SPECSWEEP_AVX2)
  return "avx2";
#else
  return "portable";
#endif
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("q4_linear", &q4_linear, "y = x Wᵀ for q4 blocks (float32 x, y)");
  m.def("q8_linear", &q8_linear, "y = x Wᵀ for q8 blocks (float32 x, y)");
  m.def("q4_linear_q8a", &q4_linear_q8a, "y = x Wᵀ for q4 blocks, x quantized per block (int8)");
  m.def("q8_linear_q8a", &q8_linear_q8a, "y = x Wᵀ for q8 blocks, x quantized per block (int8)");
  m.def("quantize_q8a", &quantize_q8a, "x per block of 32: (q, d, s = d·Σq)");
  m.def("rms_norm", &rms_norm, "w · x / sqrt(mean(x²) + eps) per row");
  m.def("add_rms_norm_", &add_rms_norm_, "x += r; rms_norm(x)");
  m.def("rope_", &rope_, "rotary embedding in place");
  m.def("layer_", &layer_, "one decoder layer (Block.forward_native) in one call");
  m.def("vectorized", &vectorized, "built with AVX2/FMA");
  m.def("isa", &isa, "the instruction set the products were built for");
}
