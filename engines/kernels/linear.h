// The weight-only block-quantized products y = x · Wᵀ (x (M, K), y (M, N) float32) as Python
// calls them: the weights' tensors checked and read as contract.h's blocks, then the family's
// product, one row per family below. q8a runs repacked weights (repack.h; the engine repacks
// once at load and calls packed_linear): given plain blocks here, it repacks them per call.
// A new family: its enumerator in contract.h, its file (family_<name>.h, on the pattern of
// family_f32.h), its row here and in bindings.cpp's enum, its row in engines/native.py
// FAMILIES, its tests.
#pragma once

#include <torch/extension.h>

#include <stdexcept>

#include "family_bf16.h"
#include "family_f32.h"
#include "family_q8a.h"
#include "repack.h"

namespace specsweep {

template <typename W>
torch::Tensor linear(const W& w, const torch::Tensor& x, int64_t N, Family family) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
              "x must be a contiguous float32 (M, K) tensor");
  TORCH_CHECK(x.size(1) == w.K && w.K % BLOCK == 0,
              "x's K must match the weights and divide by 32");
  switch (family) {
    case Family::f32: return linear_f32(w, x, N);
    case Family::q8a: break;  // q4_linear, q8_linear repack for it
    case Family::bf16:
      throw std::invalid_argument("family bf16 runs bfloat16 weights (repack_bf16), not blocks");
  }
  throw std::invalid_argument("unknown kernel family");
}

// A product on weights repacked at load, whichever family's tiles they are (their chunk's size
// says: q8a's R4 or R8, or bf16's RB).
inline torch::Tensor repacked_linear(torch::Tensor x, torch::Tensor packed, int64_t N) {
  if (packed.dim() == 3 && packed.size(2) == RB::CHUNK) {
    TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
                "x must be a contiguous float32 (M, K) tensor");
    TORCH_CHECK(packed.scalar_type() == torch::kUInt8 && packed.is_contiguous() &&
                    packed.size(0) == (N + TILE - 1) / TILE,
                "packed: the repacked weights of N rows, (tiles, K/32, 1024) uint8");
    return bf16_linear(x, packed, N);
  }
  return packed_linear(x, packed, N);
}

inline void check_scale(const torch::Tensor& s, int64_t N, int64_t K) {
  TORCH_CHECK(s.scalar_type() == torch::kFloat32 && s.is_contiguous() && s.dim() == 2 &&
              s.size(0) == N && s.size(1) == K / BLOCK, "scales: contiguous float32 (N, K/32)");
}

inline torch::Tensor q4_linear(torch::Tensor x, torch::Tensor nib, torch::Tensor scale,
                               torch::Tensor offset, Family family) {
  TORCH_CHECK(nib.scalar_type() == torch::kUInt8 && nib.is_contiguous() && nib.dim() == 2,
              "nib: contiguous uint8 (N, K/2)");
  const int64_t N = nib.size(0), K = nib.size(1) * 2;
  check_scale(scale, N, K);
  check_scale(offset, N, K);
  if (family == Family::q8a) return packed_linear(x, repack_q4(nib, scale, offset), N);
  return linear(Q4{nib.data_ptr<uint8_t>(), scale.data_ptr<float>(), offset.data_ptr<float>(), K},
                x, N, family);
}

inline torch::Tensor q8_linear(torch::Tensor x, torch::Tensor q, torch::Tensor scale,
                               Family family) {
  TORCH_CHECK(q.scalar_type() == torch::kInt8 && q.is_contiguous() && q.dim() == 2,
              "q: contiguous int8 (N, K)");
  const int64_t N = q.size(0), K = q.size(1);
  check_scale(scale, N, K);
  if (family == Family::q8a) return packed_linear(x, repack_q8(q, scale), N);
  return linear(Q8{q.data_ptr<int8_t>(), scale.data_ptr<float>(), K}, x, N, family);
}

}  // namespace specsweep
