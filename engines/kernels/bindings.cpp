// The Python module engines/native.py builds from this directory: the one translation unit,
// which includes the rest (contract.h states the numbers every build keeps; isa.h picks the
// build's ISA header; gemm.h drives the products; family_*.h, linear.h, rowops.h, layer.h).
#include <torch/extension.h>

#include <string>

#include "attention.h"
#include "isa.h"
#include "layer.h"
#include "linear.h"
#include "model.h"
#include "repack.h"
#include "rowops.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace specsweep;
  // module_local: each build (avx512, avx2, portable) has its own, so that several load in one
  // process (the tests compare them), each module taking only its own values
  py::enum_<Family>(m, "Family", "the products' arithmetic (contract.h); model.kernel names one",
                    py::module_local())
      .value("f32", Family::f32, "float32 activations (model.kernel=native)")
      .value("q8a", Family::q8a, "int8 activations per block of 32 (model.kernel=native_q8a)")
      .value("bf16", Family::bf16, "bfloat16 weights and activations (model.kernel=native_bf16)");
  m.def("q4_linear", &q4_linear, "y = x Wᵀ for q4 blocks (float32 x, y), in a family");
  m.def("q8_linear", &q8_linear, "y = x Wᵀ for q8 blocks (float32 x, y), in a family");
  m.def("quantize_q8a", &quantize_q8a, "x per block of 32 as q8a takes it: (q, d, s = d·Σq, Σq)");
  m.def("repack_q4", &repack_q4, "q4 blocks (nib, scale, offset) as q8a's tiles (R4)");
  m.def("repack_q8", &repack_q8, "q8 blocks (q, scale) as q8a's tiles (R8)");
  m.def("unpack", &unpack, "q8a's tiles of N rows back as (q, scale, offset)");
  m.def("packed_linear", &repacked_linear,
        "y = x Wᵀ on repacked weights (N output rows), in the family their tiles are for");
  m.def("repack_bf16", &repack_bf16, "bfloat16 weights (N, K) as bf16's tiles (RB)");
  m.def("unpack_bf16", &unpack_bf16, "bf16's tiles of N rows back as bfloat16 (N, K)");
  m.def("round_bf16", &round_bf16_rows, "float32 to bfloat16 as family bf16 rounds activations");
  m.def("rms_norm", &rms_norm, "w · x / sqrt(mean(x²) + eps) per row");
  m.def("add_rms_norm_", &add_rms_norm_, "x += r; rms_norm(x)");
  m.def("rope_", &rope_, "rotary embedding in place");
  m.def("attention", &attention, "decode attention over the cache, row by row (attention.h)");
  m.def("attention_seqs", &attention_seqs,
        "decode attention for several sequences' rows, each over its own cache (attention.h)");
  m.def("silu_mul", &silu_mul, "silu(gate)·up of a fused (n, 2I) projection");
  m.def("layer_", &layer_, "one decoder layer (Block.forward_native) in one call, in a family");
  m.def("attend_mlp_", &attend_mlp_,
        "a decoder layer after its input norm, q/k/v reading their own input (the EAGLE heads)");
  py::class_<Stack>(m, "Stack", "a model's tensors for the one-call forward (model.h)",
                    py::module_local())
      .def(py::init<std::vector<std::vector<torch::Tensor>>, std::vector<std::vector<torch::Tensor>>,
                    std::vector<std::vector<torch::Tensor>>, std::vector<std::vector<torch::Tensor>>,
                    std::vector<std::vector<torch::Tensor>>, torch::Tensor,
                    std::vector<torch::Tensor>, int64_t, int64_t, int64_t, double, Family>())
      .def("forward", &Stack::forward, "every layer, the final norm and the output layer")
      .def("forward_seqs", &Stack::forward_seqs,
           "the same for several sequences' rows at once, each over its own cache slots");
  m.attr("TILE") = py::int_(TILE);  // q8a's output rows a repacked tile holds
  m.def("vectorized", [] { return std::string(ISA) != "portable"; }, "built with AVX2/FMA");
  m.def("isa", [] { return std::string(ISA); }, "the instruction set the products were built for");
}
