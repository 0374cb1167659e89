"""The CI regression gate: a pinned experiment against the committed baseline.

    python -m bench.gate [--update | --quick | --self] [--plant-slowdown F] [--json PATH]
                         [--out DIR] [overrides]                          # make gate

run.py: the command (--update, --quick); experiment.py: the pinned experiment and one method's
run config; ab.py: the A/B gate, its cells (cells.py) measured by each tree's worker
(worker.py) in rotating trios (trios.py), kept unit by unit (units.py), its rows (abrows.py:
speed from paired.py, the deterministic checks from rules.py), a failed speed row measured
again (confirm.py) and its verdict (verdict.py, the table in table.py); power.py: how often the
rules fail, simulated from recorded noise; plant.py: the planted slowdown of the self-test.
"""
