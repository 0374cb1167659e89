// Family bf16 (model.kernel=native_bf16): y = x · Wᵀ with bfloat16 weights repacked into tiles
// of 16 output rows (contract.h's RB) and the activations rounded to bfloat16, in contract.h's
// order: one float32 chain per output, pair by pair, the odd product then the even one, each a
// single rounding, outputs below the smallest normal flushed: vdpbf16ps's arithmetic, run by
// that instruction where the build has it (isa_avx512.h) and emulated everywhere else (BLanes on
// the build's 8-lane primitives), the same bits either way.
#pragma once

#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "gemm.h"

namespace specsweep {

// x to bfloat16, contract.h's rounding: to nearest, ties to even; a subnormal (or zero) reads as a
// zero of its sign; NaN stays NaN, quieted; a value past bfloat16's largest rounds to infinity.
inline uint16_t round_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7F800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// A stored weight as the kernel reads it: a subnormal flushed to a zero of its sign.
inline uint16_t flush_bf16(uint16_t h) { return (h & 0x7F80u) == 0 ? (h & 0x8000u) : h; }

inline float widen_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The generic microkernel: a tile's 16 rows as two halves of 8 lanes, MM input rows at a time,
// each product the build's vfma_ftz per lane (contract.h), the pair's odd input first.
struct BLanes {
  static constexpr int MAX_M = 8;
  template <int MM>
  static void tile(const RB& w, int64_t t, const XB& x, float* out) {
    const FlushTiny scope;
    for (int h = 0; h < 2; ++h) {
      Vec acc[MM];
      for (int m = 0; m < MM; ++m) acc[m] = vzero();
      for (int64_t b = 0; b < x.nb; ++b) {
        const uint8_t* c = w.chunk(t, b);
        for (int p = 0; p < 16; ++p) {
          if (h == 0) prefetch_line(c + 4 * RB::CHUNK + p * 64);
          Vec even, odd;
          vbf16_pair(c + p * 64 + h * 32, even, odd);
          for (int m = 0; m < MM; ++m) {
            const uint16_t* xp = x.b + m * x.K + b * BLOCK + 2 * p;
            acc[m] = vfma_ftz(odd, vset(widen_bf16(xp[1])), acc[m]);
            acc[m] = vfma_ftz(even, vset(widen_bf16(xp[0])), acc[m]);
          }
        }
      }
      for (int m = 0; m < MM; ++m) vstore(out + m * TILE + h * 8, acc[m]);
    }
  }
};

using BMicro = std::conditional_t<IsaMicro<Family::bf16>::present, IsaMicro<Family::bf16>, BLanes>;

// y (M, N): threads take tiles; within a tile, input rows in chunks of up to MAX_M (gemm.h).
inline void bf16_product(const RB& w, const XB& x, int64_t M, float* y, int64_t N) {
  tiled<BMicro>(w, x, M, y, N);
}

// x (M, K) float32 against repacked weights (tiles, K/32, 1024) of N rows. The rounded rows live
// in a buffer kept from call to call, one per calling thread.
inline torch::Tensor bf16_linear(const torch::Tensor& x, const torch::Tensor& packed, int64_t N) {
  const int64_t M = x.size(0), nb = packed.size(1), K = nb * BLOCK;
  TORCH_CHECK(x.size(1) == K, "x's K must match the weights");
  thread_local std::vector<uint16_t> xb;
  xb.resize(M * K);
  const float* src = x.data_ptr<float>();
  for (int64_t i = 0; i < M * K; ++i) xb[i] = round_bf16(src[i]);
  auto y = torch::empty({M, N}, x.options());
  bf16_product(RB{packed.data_ptr<uint8_t>(), K, nb}, XB{xb.data(), K, nb}, M,
               y.data_ptr<float>(), N);
  return y;
}

// bfloat16 weights (N, K) as RB tiles, subnormals flushed.
inline torch::Tensor repack_bf16(torch::Tensor w) {
  TORCH_CHECK(w.scalar_type() == torch::kBFloat16 && w.dim() == 2, "w: bfloat16 (N, K)");
  w = w.contiguous();
  const int64_t N = w.size(0), K = w.size(1), nb = K / BLOCK;
  TORCH_CHECK(K % BLOCK == 0, "repack_bf16: K must divide by 32");
  auto out = torch::zeros({(N + TILE - 1) / TILE, nb, RB::CHUNK}, torch::dtype(torch::kUInt8));
  const uint16_t* src = reinterpret_cast<const uint16_t*>(w.data_ptr());
  uint8_t* dst = out.data_ptr<uint8_t>();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = n / TILE, r = n % TILE;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* c = dst + (t * nb + b) * RB::CHUNK;
      for (int p = 0; p < 16; ++p) {
        const uint16_t pair[2] = {flush_bf16(src[n * K + b * BLOCK + 2 * p]),
                                  flush_bf16(src[n * K + b * BLOCK + 2 * p + 1])};
        std::memcpy(c + p * 64 + r * 4, pair, 4);
      }
    }
  }
  return out;
}

// RB tiles of N rows back as bfloat16 (N, K): the weights as the kernel applies them.
inline torch::Tensor unpack_bf16(torch::Tensor packed, int64_t N) {
  TORCH_CHECK(packed.scalar_type() == torch::kUInt8 && packed.dim() == 3 &&
                  packed.size(2) == RB::CHUNK && packed.size(0) == (N + TILE - 1) / TILE,
              "unpack_bf16: (tiles, K/32, 1024) uint8 for N rows");
  packed = packed.contiguous();
  const int64_t nb = packed.size(1), K = nb * BLOCK;
  auto w = torch::empty({N, K}, torch::dtype(torch::kBFloat16));
  uint16_t* dst = reinterpret_cast<uint16_t*>(w.data_ptr());
  const uint8_t* src = packed.data_ptr<uint8_t>();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = n / TILE, r = n % TILE;
    for (int64_t b = 0; b < nb; ++b)
      for (int p = 0; p < 16; ++p)
        std::memcpy(dst + n * K + b * BLOCK + 2 * p, src + (t * nb + b) * RB::CHUNK + p * 64 + r * 4, 4);
  }
  return w;
}

// x (float32) rounded as the family rounds its activations, as bfloat16 (for tests).
inline torch::Tensor round_bf16_rows(torch::Tensor x) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x: float32");
  x = x.contiguous();
  auto out = torch::empty(x.sizes(), torch::dtype(torch::kBFloat16));
  const float* s = x.data_ptr<float>();
  uint16_t* d = reinterpret_cast<uint16_t*>(out.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) d[i] = round_bf16(s[i]);
  return out;
}

}  // namespace specsweep
