"""A node Python for tests about reaching hosts rather than measuring them: it answers the facts probe
with the records the real bundle printed on this machine once, and runs everything else (another
probe, the pair tests) with the real Python. Twenty hosts each importing torch for their facts cost
a two-core machine half a minute of CPU that such a test does not need."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpudiag.bundle import locate_bundle


def quick_facts_python(folder: Path) -> str:
    """Write the wrapper (and the facts it replays) into ``folder``; returns the wrapper's path, for
    ``--python``. The records are the real bundle's, so they pass every check the controller makes."""
    facts = folder / "facts.jsonl"
    facts.write_text(subprocess.run([sys.executable, "-m", "probes", "facts"], cwd=locate_bundle().root,
                                    capture_output=True, text=True, timeout=120, check=True).stdout)
    wrapper = folder / "quick-python"
    wrapper.write_text(f'#!/bin/sh\n# "$3" is the probe: python -m probes facts ...\ncase "$3" in\n'
                       f'  facts) exec cat {facts} ;;\n  *) exec {sys.executable} "$@" ;;\nesac\n')
    wrapper.chmod(0o755)
    return str(wrapper)
