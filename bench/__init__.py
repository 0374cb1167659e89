"""specsweep's run: one decode loop, one clock, one set of metric definitions.

    python -m bench method=ngram k=6 task=code      # one run
    python -m bench -m method=ngram,draft k=2,4,8    # a Hydra sweep

Three rooms, each importing only the ones below it (pyproject.toml's contracts):
`run/` (the cell's lifecycle; `runner` interleaves baseline and method per prompt and judges
interference; `config` is the run schema and its checks), `outputs/` (`records` writes
records.jsonl and env.json; `metrics`, `acceptance` and `verdict` turn records into the
summary; `answers`, `table`), `decode/` (`loop` owns prefill → rounds → stop, `wholeturn` the
same for transformers' generate(); `turn` is what one turn produced). Above the run:
`bench.report`, `bench.gate`, `bench.serve` and the engine tools in `bench.tools`; training is
`train`, beside bench. The clock, sampling rules, tree vocabulary and state are on the ground
floor (`groundfloor`); methods in `methods`, engines in `engines`, tasks in `tasks`.
"""
