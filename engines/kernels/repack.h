// q8a's weights repacked at load (contract.h's R4 and R8 layouts), and back (for tests and for
// the weights as the kernel applies them). Done once per weight, in plain C++: the layout is
// the same on every build.
#pragma once

#include <c10/util/Half.h>
#include <torch/extension.h>

#include <cstring>
#include <vector>

#include "contract.h"

namespace specsweep {

inline torch::Tensor new_packed(int64_t N, int64_t nb, int64_t chunk) {
  return torch::zeros({(N + TILE - 1) / TILE, nb, chunk}, torch::dtype(torch::kUInt8));
}

inline void put_half(uint8_t* p, float v) {
  const uint16_t h = c10::Half(v).x;  // to nearest, ties to even
  std::memcpy(p, &h, 2);
}

// GGUF Q4_1 nibbles (N, K/2) and float32 dw, mw (N, K/32), rounded to float16 (exact for a GGUF
// file's own, which are float16): R4.
inline torch::Tensor repack_q4(torch::Tensor nib, torch::Tensor scale, torch::Tensor offset) {
  TORCH_CHECK(nib.scalar_type() == torch::kUInt8 && nib.dim() == 2, "nib: uint8 (N, K/2)");
  nib = nib.contiguous();
  scale = scale.to(torch::kFloat32).contiguous();
  offset = offset.to(torch::kFloat32).contiguous();
  const int64_t N = nib.size(0), K = nib.size(1) * 2, nb = K / BLOCK;
  TORCH_CHECK(K % BLOCK == 0 && scale.numel() == N * nb && offset.numel() == N * nb,
              "repack_q4: K must divide by 32, scale and offset be (N, K/32)");
  auto out = new_packed(N, nb, R4::CHUNK);
  const uint8_t* src = nib.data_ptr<uint8_t>();
  const float *sc = scale.data_ptr<float>(), *of = offset.data_ptr<float>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = n / TILE, r = n % TILE;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* c = dst + (t * nb + b) * R4::CHUNK;
      // byte j of a GGUF block holds q[j] and q[16 + j]: bytes 4j'..4j'+3 are vector j'
      for (int j = 0; j < 4; ++j) std::memcpy(c + j * 64 + r * 4, src + n * (K / 2) + b * 16 + 4 * j, 4);
      put_half(c + 256 + 2 * r, sc[n * nb + b]);
      put_half(c + 288 + 2 * r, of[n * nb + b]);
    }
  }
  return out;
}

// int8 weights (N, K) and float32 dw (N, K/32): R8 (the bytes as w + 128).
inline torch::Tensor repack_q8(torch::Tensor q, torch::Tensor scale) {
  TORCH_CHECK(q.scalar_type() == torch::kInt8 && q.dim() == 2, "q: int8 (N, K)");
  q = q.contiguous();
  scale = scale.to(torch::kFloat32).contiguous();
  const int64_t N = q.size(0), K = q.size(1), nb = K / BLOCK;
  TORCH_CHECK(K % BLOCK == 0 && scale.numel() == N * nb,
              "repack_q8: K must divide by 32, scale be (N, K/32)");
  auto out = new_packed(N, nb, R8::CHUNK);
  const int8_t* src = q.data_ptr<int8_t>();
  const float* sc = scale.data_ptr<float>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = n / TILE, r = n % TILE;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* c = dst + (t * nb + b) * R8::CHUNK;
      for (int g = 0; g < 8; ++g)
        for (int k = 0; k < 4; ++k)
          c[g * 64 + r * 4 + k] = static_cast<uint8_t>(src[n * K + b * BLOCK + 4 * g + k]) ^ 0x80;
      std::memcpy(c + 512 + 4 * r, sc + n * nb + b, 4);
    }
  }
  return out;
}

// The repacked weights of N rows back as (qw (N, K) int8, dw (N, K/32), mw (N, K/32): zero for
// R8) with w = dw·qw + mw.
inline std::vector<torch::Tensor> unpack(torch::Tensor packed, int64_t N) {
  TORCH_CHECK(packed.scalar_type() == torch::kUInt8 && packed.dim() == 3 &&
                  packed.size(0) == (N + TILE - 1) / TILE,
              "unpack: (tiles, K/32, CHUNK) uint8 for N rows");
  packed = packed.contiguous();
  const int64_t nb = packed.size(1), K = nb * BLOCK, chunk = packed.size(2);
  const bool q4 = chunk == R4::CHUNK;
  TORCH_CHECK(q4 || chunk == R8::CHUNK, "unpack: a chunk of 320 (R4) or 576 (R8) bytes");
  auto qw = torch::empty({N, K}, torch::dtype(torch::kInt8));
  auto dw = torch::zeros({N, nb}, torch::dtype(torch::kFloat32));
  auto mw = torch::zeros({N, nb}, torch::dtype(torch::kFloat32));
  const uint8_t* src = packed.data_ptr<uint8_t>();
  int8_t* q = qw.data_ptr<int8_t>();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = n / TILE, r = n % TILE;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* c = src + (t * nb + b) * chunk;
      int8_t* row = q + n * K + b * BLOCK;
      for (int j = 0; j < 4; ++j)
        for (int k = 0; k < 4; ++k) {
          const uint8_t v = c[j * 64 + r * 4 + k];
          if (q4) {
            row[4 * j + k] = static_cast<int8_t>(v & 0x0F);
            row[16 + 4 * j + k] = static_cast<int8_t>(v >> 4);
          } else {
            row[4 * j + k] = static_cast<int8_t>(v ^ 0x80);
            row[16 + 4 * j + k] = static_cast<int8_t>(c[(j + 4) * 64 + r * 4 + k] ^ 0x80);
          }
        }
      uint16_t h;
      if (q4) {
        std::memcpy(&h, c + 256 + 2 * r, 2);
        dw.data_ptr<float>()[n * nb + b] = static_cast<float>(c10::Half(h, c10::Half::from_bits()));
        std::memcpy(&h, c + 288 + 2 * r, 2);
        mw.data_ptr<float>()[n * nb + b] = static_cast<float>(c10::Half(h, c10::Half::from_bits()));
      } else {
        std::memcpy(dw.data_ptr<float>() + n * nb + b, c + 512 + 4 * r, 4);
      }
    }
  }
  return {qw, dw, mw};
}

}  // namespace specsweep
