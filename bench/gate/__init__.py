"""The CI regression gate: a pinned experiment against the committed baseline.

    python -m bench.gate [--update] [--out DIR] [overrides]      # make gate

run.py measures and compares; rules.py holds the comparison rules and tolerances.
"""
