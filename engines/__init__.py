"""Engines: the target (and draft) model behind one forward and one cache interface.

    engines.load.load("embedded:smollm2-135m", "cpu")   # → (engine, choice)

`hf` runs any transformers causal LM exactly as transformers defines it (engines/hf.py); `lean`
is our own Llama-family forward whose point is the weight format and kernel (engines/lean.py,
engines/formats.py, built from checkpoint tensors or GGUF blocks by engines/build.py). The
interface (engines/base.py) is all that methods, the baseline, the tree budget, the greedy
verdict and training-data generation use; engines/probe.py times the cost curve c(q) and kernels;
engines/load.py picks engine, weight format, dtype and kernel per machine and says why.

The other modules: engines/cache.py (KV caches: crop, keep a path), engines/shared.py (one
target shared by several sequences' threads), engines/gguf.py (a GGUF's tensors as stored),
engines/bf16file.py and engines/bf16gguf.py (the 16-bit copy of a GGUF, as a cache file and
as a BF16 GGUF for llama.cpp), engines/cpu.py (the CPU's flags), engines/hugepages.py (weights
in 2 MB pages).
Our CPU kernels are engines/kernels/, built by engines/native.py: contract.h states the numbers
every build keeps; a new instruction set is one header (isa.h says how); a new kernel family is
one file, its rows (linear.h says where) and one row of engines.native.FAMILIES, which maps each
model.kernel value to its family.
"""
