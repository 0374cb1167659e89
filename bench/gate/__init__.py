"""The CI regression gate: a pinned experiment against the committed baseline.

    python -m bench.gate [--update | --quick | --self] [--plant-slowdown F] [--json PATH]
                         [--out DIR] [overrides]                          # make gate

run.py: the command (--update, --quick); ab.py: the A/B gate, its cells (cells.py) measured by
each tree's worker (worker.py) in rotating trios (trios.py), its rows (abrows.py: speed from
paired.py, the deterministic checks from rules.py) and its verdict (verdict.py); plant.py: the
planted slowdown of the self-test.
"""
