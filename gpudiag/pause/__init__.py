"""``gpudiag sweep --pause``: checking the nodes of a training job paused to mitigate a slowdown.

The job keeps its processes and most of each GPU's memory; the probes size themselves to what it
left (the bundle's ``--pause``: probes/pause.py), links run over host memory, and the deadline
and the run's budget are short (``options``). ``--suspects`` narrows the sweep to the hosts the job's own monitoring
suspects, with a few unsuspected peers as reference (``focus``).
"""

from .focus import DEFAULT_REFERENCE_PEERS, Focus, FocusRequest, focus_hosts, focused_thresholds
from .options import PAUSE_BUDGET_S, PAUSE_DEADLINE_S, check_pause_backend, pause_budget_s, pause_deadline_s

__all__ = ["DEFAULT_REFERENCE_PEERS", "PAUSE_BUDGET_S", "PAUSE_DEADLINE_S", "Focus", "FocusRequest",
           "check_pause_backend", "focus_hosts", "focused_thresholds", "pause_budget_s", "pause_deadline_s"]
