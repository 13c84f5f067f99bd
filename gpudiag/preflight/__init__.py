"""``gpudiag preflight``: a quick check of a job's nodes before it starts, within a time budget.

- ``planner``: from ``--budget S`` and the number of nodes, the probes, their load, the link
  screen and the re-test that fit (the plan printed before anything runs).
- ``run``: the plan carried out as a sweep under that budget (gpudiag.run.sweep.run_sweep with a
  run-wide deadline, gpudiag.run.budget), then drain and undrain through scontrol.
- ``render``: the plain lines a prolog logs, and the one-line summary.
"""

from .planner import PreflightPlan, plan_preflight
from .run import DEFAULT_BUDGET_S, PreflightRequest, PreflightRun, run_preflight

__all__ = ["DEFAULT_BUDGET_S", "PreflightPlan", "PreflightRequest", "PreflightRun", "plan_preflight",
           "run_preflight"]
