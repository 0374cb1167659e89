// The build's instruction set: the widest ISA header the compiler's flags allow (engines/native.py
// FLAGS picks the flags; SPECSWEEP_ISA asks for a narrower build). A header extends the one it
// includes, so a build has every narrower header's functions too.
//
// What every ISA header provides, each keeping contract.h's order (isa_portable.h is the
// reference, in plain C++):
//   Vec                          8 float lanes;  vzero(), vload(p), vstore(p, a), vset(x),
//                                vfma(a, b, c) = a·b + c (one rounding), vmul, vadd, vdiv,
//                                vclamp, vround (to nearest even), vpow2 (2^n for integral n)
//   finish(a0, a1)               contract.h's fixed sum of two accumulators
//   q4_block, q8_block           f32: one block's 32 weights as four Vec
//   quantize_block               q8a: 32 activations to int8, their sum and scale
//   RLanes                       q8a: the microkernel over a repacked tile (family_q8a.h)
//   vbf16_pair, vfma_ftz,        bf16: a repacked vector's pair widened; an fma whose tiny
//   FlushTiny                    results are flushed, within a FlushTiny scope (family_bf16.h);
//                                prefetch_line, a hint or nothing
//   dot(a, b, n)                 the row ops' Σ a·b (rowops.h, attention.h): dot_parts(a, b, n,
//                                a0, a1) then finish; finish8 finishes eight pairs into 8 lanes;
//                                dot_parts' b float32 or bfloat16 bits (vload of uint16_t widens)
//   SPECSWEEP_VEC_REGS           the registers an 8-lane vector may use (16, or 32 with AVX-512VL)
// and may specialize IsaMicro<Family> (contract.h) with a microkernel of its own (gemm.h for
// f32, family_q8a.h for q8a).
// A new ISA: its header, one line here and its name, and the build's flags in engines/native.py.
#pragma once

#if defined(__AVX2__) && defined(__FMA__) && defined(__AVX512F__) && \
    defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include "isa_avx512vnni.h"
#define SPECSWEEP_ISA_NAME "avx512+vnni"
#elif defined(__AVX2__) && defined(__FMA__) && defined(__AVX512F__)
#include "isa_avx512.h"
#define SPECSWEEP_ISA_NAME "avx512"
#elif defined(__AVX2__) && defined(__FMA__)
#include "isa_avx2.h"
#define SPECSWEEP_ISA_NAME "avx2"
#else
#include "isa_portable.h"
#define SPECSWEEP_ISA_NAME "portable"
#endif

#ifdef __AVX512BF16__
#define SPECSWEEP_BF16_NAME "+bf16"  // family bf16 by vdpbf16ps (isa_avx512.h)
#else
#define SPECSWEEP_BF16_NAME ""
#endif

namespace specsweep {

constexpr const char* ISA = SPECSWEEP_ISA_NAME SPECSWEEP_BF16_NAME;

}  // namespace specsweep
