"""``python -m probes``: see probes/runner.py; ``python -m probes net-...``: see probes/net.py."""

import sys

from . import net
from .runner import main

if len(sys.argv) > 1 and sys.argv[1] in net.COMMANDS:
    sys.exit(net.main(sys.argv[1:]))
sys.exit(main())
