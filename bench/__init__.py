"""specsweep's run: one decode loop, one clock, one set of metric definitions.

    python -m bench method=ngram k=6 task=code      # one run
    python -m bench -m method=ngram,draft k=2,4,8    # a Hydra sweep

`runner` interleaves baseline and method per prompt and judges interference; `loop` owns
prefill → rounds → stop (`wholeturn` the same for transformers' generate()); `turn` is what one
turn produced; `records` writes records.jsonl and env.json; `metrics` and `verdict` turn records
into the summary; `config` is the run schema and its checks. The clock, sampling rules, tree
vocabulary and state are on the ground floor (`groundfloor`); methods in `methods`, engines in
`engines`, tasks in `tasks`. On top: `bench.report`, `bench.gate`, `bench.serve`, `train`.
"""
