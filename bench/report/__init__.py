"""The report: charts and tables of every run directory, into reports/index.md.

    python -m bench.report [RUN_DIR ...] [--out reports]      # make report

index.py builds the page (one function per section), tables.py the tables, charts.py the
charts, serve.py the server section, specbench_import.py reads Spec-Bench answer files.
"""

from bench.report.index import build, main  # noqa: F401
