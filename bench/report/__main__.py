"""`python -m bench.report`: see bench/report/index.py."""

import sys
import warnings

from bench.report.index import main

warnings.filterwarnings("ignore", category=UserWarning)
sys.exit(main())
