"""specsweep's harness: one decode loop, one clock, one set of metric definitions.

    python -m bench method=ngram k=6 task=code      # one run
    python -m bench -m method=ngram,draft k=2,4,8    # a Hydra sweep

Layout: `loop` owns prefill → rounds → stop; `clock` times phases; `sampling` holds the
accept rules; `kvcache` the cache surgery; `models` loads targets and drafts; `runner`
interleaves baseline and method per prompt; `metrics` and `verdict` turn records into the
summary. Methods live in the top-level `methods` package, tasks in `tasks`.
"""
