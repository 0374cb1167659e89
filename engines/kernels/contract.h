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
  // model.kernel=native_q8a (family_q8a.h): llama.cpp's scheme. Each input row is quantized
  // per block of 32, d = amax/127, q = round(x/d) (x·(1/d) to nearest, ties to even),
  // s = d·Σq; then per block the weights' integers and the activations' multiply as integers
  // and are scaled once:
  //   q4:  y = Σ_b dw·dx·Σ_j qw_j·qx_j + Σ_b mw·s        (w = dw·qw + mw, qw ∈ 0..15)
  //   q8:  y = Σ_b dw·dx·Σ_j qw_j·qx_j                   (w = dw·qw, qw int8)
  // Lane i of a block's integer sum holds its bytes 4i..4i+3; even blocks accumulate into a0
  // and odd ones into a1 (fma(float(Σ), dw·dx, a)); y = finish(a0, a1) + the offsets' sum
  // taken block by block (q8a_offsets). Other numbers than f32, hence a kernel of its own.
  q8a,
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

// Quantized activations (q8a): q (M, K) int8, d and s (M, K/32), d8 each d repeated 8 times
// (the AVX-512 products read two blocks' scales at once).
struct XQ {
  const int8_t* q; const float* d; const float* s; const float* d8; int64_t K, nb;
  XQ at(int64_t m0) const {
    return XQ{q + m0 * K, d + m0 * nb, s + m0 * nb, d8 + m0 * nb * 8, K, nb};
  }
};

// q8a's offsets' sum for row n against input row m, block by block (q4 only: q8 has none).
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

// An ISA's own microkernel for a family (see gemm.h for the shape of one); an ISA header
// specializes it where it has one. Without one, or where `fits` refuses the inputs, the
// family's generic microkernel runs, on the ISA's 8-lane vectors.
template <Family F>
struct IsaMicro {
  static constexpr bool present = false;
};

}  // namespace specsweep
