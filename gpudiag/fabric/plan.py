"""The link phase with a topology (gpudiag.links.rounds.LinkPlan): the fabric's screen, the
fabric attribution, and confirm rounds for the fabric's suspects beside the NICs'.

``FabricPlan.latest`` is the fabric attribution of everything measured so far; the sweep reads it
once the link phase ends (its NIC and pair part is what ``run_links`` returns as the run's
attribution)."""

from __future__ import annotations

from collections.abc import Sequence

from ..links.attribution import LinkAttribution, LinkBaseline, LinkThresholds
from ..links.rounds import MAX_CONFIRM_PHASES, LinkRecord
from ..links.schedule import FULL, Round, Suspects, confirm_rounds, full_rounds, pair_levels
from .attribution import FabricAttribution, attribute_fabric
from .elements import Element
from .model import Topology
from .schedule import fabric_confirm_pairs, fabric_screen_rounds, pack_rounds


class FabricPlan:
    """The rounds and verdicts of a link phase over ``topology`` (``mode``: screen or full), each
    pair test of ``streams`` streams."""

    def __init__(self, topology: Topology, mode: str, thresholds: LinkThresholds,
                 baseline: LinkBaseline | None = None, streams: int = 4) -> None:
        self.topology = topology
        self.streams = streams  # each pair test's streams (gpudiag.fabric.schedule.stream_count)
        self.mode = mode
        self.thresholds = thresholds
        self.baseline = baseline
        self.latest: FabricAttribution | None = None
        self.fabric_rounds = 0  # confirm rounds that re-tested a fabric suspect
        self._confirming: set[tuple[Element, ...]] = set()  # fabric suspects a confirm round took up

    @property
    def confirm_phases(self) -> int:
        return MAX_CONFIRM_PHASES

    def first_rounds(self, hosts: Sequence[str]) -> list[Round]:
        """The fabric's screen (gpudiag.fabric.schedule), or every pair for ``full``."""
        return full_rounds(hosts) if self.mode == FULL else fabric_screen_rounds(hosts, self.topology)

    def attribute(self, records: Sequence[LinkRecord]) -> LinkAttribution:
        self.latest = attribute_fabric([(r.phase, r.result) for r in records], self.topology, self.thresholds,
                                       baseline=self.baseline)
        return self.latest.links

    def confirm(self, attribution: LinkAttribution, suspects: Suspects, records: Sequence[LinkRecord]) -> list[Round]:
        """The NIC and pair confirm rounds, with pairs that re-test each fabric suspect not yet
        re-tested (once each) fitted in."""
        tested = [r.result.pair for r in records]
        nic_rounds = confirm_rounds(suspects, attribution.partners, tested, attribution.line_rates,
                                    pair_levels((r.result.pair, r.result.gbps) for r in records)) if suspects else []
        wanted = [s.elements for s in (self.latest.suspects if self.latest else ())
                  if not s.confirmed and not s.cleared and s.elements not in self._confirming]
        if not wanted:
            return nic_rounds
        self._confirming |= set(wanted)
        doubted = {host for nic in attribution.nics for host in (nic.host,)} | set(suspects.hosts)
        hosts = sorted({host for r in records for host in (r.result.a, r.result.b)} - doubted)
        extra = fabric_confirm_pairs(wanted, self.topology, hosts, tested, self.streams)
        rounds = pack_rounds(nic_rounds, extra)
        self.fabric_rounds += sum(1 for r in rounds if set(r.pairs) & set(extra))
        return rounds
