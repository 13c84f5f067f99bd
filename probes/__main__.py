"""``python -m probes``: see probes/runner.py; ``python -m probes net-...``: see probes/net/main.py."""

import sys

from .net.common import COMMANDS
from .net.main import main as net_main
from .runner import main

if len(sys.argv) > 1 and sys.argv[1] in COMMANDS:
    sys.exit(net_main(sys.argv[1:]))
sys.exit(main())
