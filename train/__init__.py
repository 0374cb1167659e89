"""Training drafters for a target: self-distillation data, a training loop, published layouts.

    python -m train drafter=medusa          # heads for the embedded SmolLM2 target

`prompts` writes the training prompt set (disjoint from every benchmark prompt), `distill` has
the target answer it and stores tokens and hidden states, `loop` trains with checkpoints and a
held-out evaluation, and one module per drafter defines its network, loss and file layout.
"""
