"""The report: charts and tables of every run directory, into reports/index.md.

    python -m bench.report [RUN_DIR ...] [--out reports]      # make report

runs.py loads the finished runs, index.py builds the page (one function per section; group.py
one group's sections), tables.py the tables, charts.py the charts, writer.py the Markdown and
its files, serve.py the server section, batch.py the batch=B section, targets.py each method on
both targets side by side, specbench_import.py reads Spec-Bench answer files.
"""

from bench.report.index import build, main  # noqa: F401
