// The numeric contract of engines/kernels: what every build computes, operation for operation,
// so that the AVX-512, AVX2 and portable builds give the same bits (tests/test_engines.py builds
// them side by side and compares). An ISA header (isa.h) may use other instructions, never
// another order.
//
// Block layouts, 32 weights per block along the input dimension K:
//   q4   nib (N, K/2) uint8: byte j of block b holds q[b·32 + j] (low nibble) and
//        q[b·32 + 16 + j] (high nibble) — GGUF's Q4_1 order;  w = scale·q + offset, q ∈ 0..15
//   q8   q (N, K) int8;                                        w = scale·q
// with scale, offset (N, K/32) float32. The embedded model's Q4_1 and Q8_0 blocks are these
// formats with their f16 scales widened exactly, so the weights are the shipped ones.
//
// A product y = x · Wᵀ (x (M, K) and y (M, N) float32) is in one of the families below;
// model.kernel names the family (engines/native.py FAMILIES). Every y[m, n] is its family's
// operations in its family's order whatever M, the chunk of input rows it is computed in and
// the thread, so a row's result does not depend on how many rows the call has: a verify forward
// over q tokens gives each token the numbers a one-token forward gives.
//
// finish(a0, a1), two 8-lane accumulators to one float, in a fixed tree:
//   s = a0 + a1 lane by lane;  h[j] = s[j] + s[j + 4];  y = (h[0] + h[2]) + (h[1] + h[3])
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace specsweep {

constexpr int64_t BLOCK = 32;  // weights per quantization block
constexpr int64_t ROWS = 4;    // output rows per tile, a thread's unit of work (gemm.h)

enum class Family {
  // model.kernel=native (family_f32.h): the activations as they are. Each weight is expanded
  // as fma(q, scale, offset) (q4) or q·scale (q8), then per block, one fma per 8 lanes:
  //   a0 += w[0:8]·x[0:8];    a1 += w[8:16]·x[8:16];
  //   a0 += w[16:24]·x[16:24];  a1 += w[24:32]·x[24:32]
  // and y = finish(a0, a1).
  f32,
  // model.kernel=native_q8a (family_q8a.h): llama.cpp's scheme. Each input row m is quantized
  // per block b of 32, dx = amax/127, qx = round(x/dx) (x·(1/dx) to nearest, ties to even),
  // sq = Σ qx (an integer), s = dx·float(sq); the weights run repacked (below). Per output n,
  // from acc = 0, block by block in order:
  //   i   = Σ_j qw_j·qx_j, an exact integer (so any split of the sum gives the same i)
  //   acc = fma(float(i), dw·dx, acc);  q4 only:  acc = fma(mw, s, acc)
  // and y = acc: one float chain per output, its steps depending on nothing but row m and
  // row n, so a row's y is the same bits alone or among any number of rows, on every build.
  // Weights: q4 w = dw·qw + mw (qw ∈ 0..15), q8 w = dw·qw (qw int8); in R4 dw and mw are
  // float16 (GGUF's Q4_1 scales are), in R8 dw is float32.
  q8a,
  // model.kernel=native_bf16 (family_bf16.h): bfloat16 weights, activations rounded to
  // bfloat16, products exact, sums in float32: the arithmetic of AVX512-BF16's vdpbf16ps, which
  // the builds that have it run and every other build emulates bit for bit. Each input value is
  // rounded to bfloat16 to nearest, ties to even (x and its rounding in float32: a value below
  // the smallest normal float reads as a zero of its sign; NaN stays NaN, quieted); the weights
  // are stored as bfloat16 with any subnormal flushed to a zero of its sign at repack. Per output
  // n of input row m, from acc = +0, pair by pair in input order (p = 0 .. K/2 − 1):
  //   acc = ftz(fma(w[2p+1], x[2p+1], acc));  acc = ftz(fma(w[2p], x[2p], acc))
  // and y = acc, where fma rounds once to nearest even and ftz(v) is v, or a zero of v's sign
  // where |v| is below the smallest normal float (the instruction's flush of its outputs). A
  // bfloat16 product is exact in float32's significand, so each step is one rounding. One chain
  // per output, depending on nothing but row m and row n: the same bits alone or among any
  // number of rows, on every build.
  bf16,
};

// q8a's weights, repacked at load (repack.h) into tiles of TILE output rows: for tile t and
// block b one chunk of bytes, the chunks tile-major (a thread's tiles are one stream), so that
// a 16-lane vector holds one value per output row and an activation word broadcast to every
// lane advances all 16 rows (vpdpbusd):
//   R4 (320 B)  4 × 64 B: vector j, lane r (bytes 4r..4r+3) holds qw[r][4j..4j+3] in its low
//               nibbles and qw[r][16+4j..16+4j+3] in its high ones; then dw (16 × float16)
//               and mw (16 × float16) of the tile's rows
//   R8 (576 B)  8 × 64 B: vector g, lane r holds qw[r][4g..4g+3] + 128 as unsigned bytes;
//               then dw (16 × float32)
// Rows past N (the last tile's padding) are zero.
constexpr int64_t TILE = 16;

struct R4 {
  static constexpr int64_t CHUNK = 320;
  const uint8_t* p; int64_t K, nb;
  const uint8_t* chunk(int64_t t, int64_t b) const { return p + (t * nb + b) * CHUNK; }
};
struct R8 {
  static constexpr int64_t CHUNK = 576;
  const uint8_t* p; int64_t K, nb;
  const uint8_t* chunk(int64_t t, int64_t b) const { return p + (t * nb + b) * CHUNK; }
};

// bf16's weights, repacked at load (family_bf16.h) into tiles of TILE output rows: for tile t
// and block b (32 inputs, 16 pairs) one chunk of 16 × 64 B, the chunks tile-major; vector p of
// a chunk holds, in lane r (bytes 4r..4r+3), the bfloat16 bits of w[r][2p] (low half) and
// w[r][2p + 1] (high half), as vdpbf16ps reads a pair. Rows past N are zero.
struct RB {
  static constexpr int64_t CHUNK = 1024;
  const uint8_t* p; int64_t K, nb;
  const uint8_t* chunk(int64_t t, int64_t b) const { return p + (t * nb + b) * CHUNK; }
};

// bf16's activations: M rows of K bfloat16 bits (x rounded as above).
struct XB {
  const uint16_t* b; int64_t K, nb;
  XB at(int64_t m0) const { return XB{b + m0 * K, K, nb}; }
};

// The weights' blocks (layouts above); K is the input width.
struct Q4 {
  const uint8_t* nib; const float* scale; const float* offset; int64_t K;
};
struct Q8 {
  const int8_t* q; const float* scale; int64_t K;
};

// Float activations (f32): M rows of K values; `at(m0)` is the chunk from row m0.
struct XF {
  const float* data; int64_t K;
  XF at(int64_t m0) const { return XF{data + m0 * K, K}; }
};

// Quantized activations (q8a): q (M, K) int8; d, s (M, K/32) float32, sq (M, K/32) int32.
struct XQ {
  const int8_t* q; const float* d; const float* s; const int32_t* sq; int64_t K, nb;
  XQ at(int64_t m0) const { return XQ{q + m0 * K, d + m0 * nb, s + m0 * nb, sq + m0 * nb, K, nb}; }
};

// An ISA's own microkernel for a family (see gemm.h for the shape of one); an ISA header
// specializes it where it has one. Without one, or where `fits` refuses the inputs, the
// family's generic microkernel runs, on the ISA's 8-lane vectors.
template <Family F>
struct IsaMicro {
  static constexpr bool present = false;
};

}  // namespace specsweep
