"""``gpudiag triage HOST``: a deep look at one node for the engineer on call.

``run`` runs every node probe and the kernel log's Xid history on the host, with a longer load,
and judges the results as a sweep does, against the stored baseline and the host's history;
``xid`` decodes the Xids with NVIDIA's catalog (gpudiag/data/xid_catalog.json); ``explain``
turns it all into explained findings with evidence and the next action, and says what could not be
checked; ``render`` prints it.
"""

from ..analysis.xid import XidCatalog, XidReport, decode, load_catalog
from .explain import ExplainedFinding, Triage, explain
from .render import render_text
from .run import DEFAULT_DURATION_S, TRIAGE_PROBES, TriageRequest, TriageRun, default_deadline_s, run_triage

__all__ = ["DEFAULT_DURATION_S", "TRIAGE_PROBES", "ExplainedFinding", "Triage", "TriageRequest", "TriageRun",
           "XidCatalog", "XidReport", "decode", "default_deadline_s", "explain", "load_catalog", "render_text",
           "run_triage"]
