"""`python -m bench.gate`: see bench/gate/run.py."""

import sys
import warnings

from bench.gate.run import main

warnings.filterwarnings("ignore", category=UserWarning)
sys.exit(main())
