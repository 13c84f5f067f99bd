"""``python -m probes``: see probes/runner.py."""

import sys

from .runner import main

sys.exit(main())
