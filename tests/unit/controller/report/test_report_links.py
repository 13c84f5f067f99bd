"""The reports' link section (HTML rows per host, small-fleet matrix, text and markdown) on sweep
documents built like a screen: host i paired with i+1 and i+2 (mod N) on several rails, one host
slow with every partner, one pair slow on one rail, one pair that could not be tested, and the
link findings that name them."""

from __future__ import annotations

import re
import statistics
import time
from html.parser import HTMLParser
from typing import Any

import pytest
from ClusterShell.NodeSet import NodeSet
from html_tables import HtmlTables

from gpudiag.report import render_report
from gpudiag.report.linkmap import LINK_MATRIX_MAX_HOSTS, OTHER_ROWS_SHOWN, html_links

LINE_RATE_GBPS = 100.0
HEALTHY_GBPS = 94.0
SLOW_NIC_GBPS = 41.0
SLOW_LINK_GBPS = 60.0
SLOW_RAIL = 2
ERROR_REASON = "pair server on node did not start: connection refused"
EVIL = "<b>x</b>"


def name(index: int) -> str:
    return f"node{index:04d}"


def healthy_gbps(pair_index: int, rail: int) -> float:
    """93.0–95.1: a spread across pairs (and a little across rails), so every rail has a real
    median and healthy hosts differ in their worst pair."""
    return HEALTHY_GBPS - 1.0 + (pair_index * 37 % 101) * 0.02 + rail * 0.01


def screen_pairs(count: int) -> list[tuple[int, int]]:
    """Host i with i+1 and i+2 (mod count), each unordered pair once."""
    pairs: list[tuple[int, int]] = []
    seen = set()
    for i in range(count):
        for step in (1, 2):
            j = (i + step) % count
            key = (min(i, j), max(i, j))
            if key not in seen:
                seen.add(key)
                pairs.append((i, j))
    return pairs


def link_entry(a: str, b: str, rail: int, value: float | None, phase: str = "screen",
               error: str | None = None, line_rate: float | None = LINE_RATE_GBPS) -> dict[str, Any]:
    return {"a": a, "b": b, "rail": rail, "backend": "tcp", "metric": "gbps", "value": value, "unit": "Gbit/s",
            "phase": phase, "line_rate_gbps": line_rate, "error": error}


def link_finding(kind: str, severity: str, host: str, peer: str | None = None, deficit: float | None = None,
                 value: float | None = None, reference: float | None = None, evidence: str = "") -> dict[str, Any]:
    return {"kind": kind, "severity": severity, "host": host, "peer": peer, "gpu": None, "peer_gpu": None,
            "gpu_uuid": None, "pci_bus_id": None, "metric": "link.tcp", "value": value, "reference": reference,
            "unit": "Gbit/s", "reference_source": "fleet", "deficit_pct": deficit, "robust_z": None,
            "share_pct": None, "confirmed": severity == "fail",
            "basis": "error_record" if kind == "link_error" else "retest", "evidence": evidence,
            "action": "inspect", "action_detail": "check the NIC, cable and switch port"}


def host_entry(label: str, status: str = "ok", error: str | None = None) -> dict[str, Any]:
    return {"host": label, "status": status, "error": error, "duration_s": 10.0,
            "facts": {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8}, "results": []}


def screen_document(count: int, rails: int = 4, *, slow_host: int = 2, slow_pair: tuple[int, int] = (7, 8),
                    warn_pair: tuple[int, int] = (9, 11), error_pair: tuple[int, int] = (5, 6),
                    names: dict[int, str] | None = None) -> dict[str, Any]:
    """``count`` hosts in a screen-like schedule on ``rails`` rails: ``slow_host`` at SLOW_NIC_GBPS
    with every partner (slow_nic, fail), ``slow_pair`` at SLOW_LINK_GBPS on rail SLOW_RAIL only
    (slow_link, fail), ``warn_pair`` 8 % low on rail 0 (slow_link, warn), ``error_pair`` with
    no figure on any rail (link_error). Two more hosts of the sweep are in no pair: one whose node
    probes timed out, one left out of the rounds for want of a data-plane address."""
    label = {i: (names or {}).get(i, name(i)) for i in range(count + 2)}
    links, error = [], {tuple(sorted(error_pair))}
    for index, (i, j) in enumerate(screen_pairs(count)):
        key = (min(i, j), max(i, j))
        for rail in range(rails):
            value: float | None = healthy_gbps(index, rail)
            if slow_host in key:
                value = SLOW_NIC_GBPS + rail * 0.1
            elif key == tuple(sorted(slow_pair)) and rail == SLOW_RAIL:
                value = SLOW_LINK_GBPS
            elif key == tuple(sorted(warn_pair)) and rail == 0:
                value = 0.92 * HEALTHY_GBPS
            if key in error:
                links.append(link_entry(label[i], label[j], rail, None, error=ERROR_REASON))
            else:
                links.append(link_entry(label[i], label[j], rail, value))
    # A confirm round re-tested the slow pair: its rail figure is the median of both runs.
    links.append(link_entry(label[slow_pair[0]], label[slow_pair[1]], SLOW_RAIL, SLOW_LINK_GBPS + 2.0, "confirm"))
    findings = [
        link_finding("link_error", "warn", label[error_pair[0]], label[error_pair[1]], evidence=ERROR_REASON),
        link_finding("slow_link", "warn", label[warn_pair[0]], label[warn_pair[1]], 8.0, 86.5, 94.2,
                     evidence="both ends fine with other partners"),
        link_finding("slow_link", "fail", label[slow_pair[0]], label[slow_pair[1]], 35.2, 61.0, 94.2,
                     evidence="both ends fine with other partners"),
        link_finding("slow_nic", "fail", label[slow_host], deficit=56.5, value=41.0, reference=94.2,
                     evidence="slow with every partner"),
        {"kind": "unchecked", "severity": "warn", "host": label[count + 1], "peer": None, "gpu": None,
         "metric": None, "value": None, "reference": None, "deficit_pct": None, "confirmed": False,
         "evidence": "not pair-tested: left out of the link rounds: the hosts file gives no net= address for it",
         "action": "inspect"},
    ]
    hosts = [host_entry(label[i]) for i in range(count)]
    hosts.append(host_entry(label[count], "timeout", "no answer in 600 s"))
    hosts.append(host_entry(label[count + 1]))
    return {"schema": "gpudiag.sweep/1", "sweep_id": "20261201T000000Z-1ink", "started_at": "2026-12-01T00:00:00Z",
            "finished_at": "2026-12-01T00:05:00Z", "hosts": hosts, "links": links, "findings": findings,
            "summary": {"hosts_total": count + 2, "hosts_ok": count + 1, "findings": len(findings), "exit_code": 1}}


class Cells(HTMLParser):
    """Every <td>/<th> of one table by id: (row, text, attributes)."""

    def __init__(self, table_id: str) -> None:
        super().__init__()
        self.table_id, self.inside, self.rows = table_id, False, []
        self._cell: dict[str, Any] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.inside = dict(attrs).get("id") == self.table_id
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag in ("td", "th"):
            self._cell = {"text": "", **{key: value or "" for key, value in attrs}}

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.inside = False
        elif tag in ("td", "th") and self._cell is not None:
            self._cell["text"] = self._cell["text"].strip()
            self.rows[-1].append(self._cell)
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell["text"] += data


def cells(text: str, table_id: str) -> list[list[dict[str, Any]]]:
    parser = Cells(table_id)
    parser.feed(text)
    return parser.rows


def tables(text: str) -> dict[str, list[list[str]]]:
    parser = HtmlTables()
    parser.feed(text)
    return parser.tables


def paragraph(text: str, paragraph_id: str) -> str:
    found = re.search(rf'<p class="legend" id="{paragraph_id}">(.*?)</p>', text)
    assert found is not None, paragraph_id
    return found.group(1)


SUSPECT_GROUPS = [{name(2)}, {name(7), name(8)}, {name(9), name(11)}, {name(5), name(6)}]
SUSPECTS = [host for group in SUSPECT_GROUPS for host in sorted(group)]


def assert_suspects_first(hosts: list[str]) -> None:
    """slow_nic, then the fail slow_link's two ends, the warn slow_link's, the link_error's (the
    two ends of one finding side by side, in either order)."""
    start = 0
    for group in SUSPECT_GROUPS:
        assert set(hosts[start:start + len(group)]) == group, (hosts[:8], group)
        start += len(group)


def worst_by_host(document: dict[str, Any],
                  leaving_out: frozenset[str] = frozenset()) -> dict[str, tuple[float, float]]:
    """(lowest ratio to its rail's median pair figure, that figure) of every host, from the
    document's links (a pair's figure on a rail is the median of its runs), leaving out the pairs
    with a host of ``leaving_out`` (a slow NIC explains them) for the host at the other end."""
    runs: dict[tuple[tuple[str, str], int], list[float]] = {}
    for entry in document["links"]:
        if entry["value"] is not None:
            runs.setdefault((tuple(sorted((entry["a"], entry["b"]))), entry["rail"]), []).append(entry["value"])
    figure = {key: statistics.median(values) for key, values in runs.items()}
    reference = {rail: statistics.median(v for (_, r), v in figure.items() if r == rail)
                 for rail in {rail for _, rail in figure}}
    worst: dict[str, tuple[float, float]] = {}
    for (pair, rail), value in figure.items():
        for host, other in (pair, pair[::-1]):
            if other in leaving_out:
                continue
            candidate = (value / reference[rail], value)
            worst[host] = min(worst.get(host, candidate), candidate)
    return worst


# --------------------------------------------------------------------------------------- ordering


@pytest.mark.parametrize("count", [12, 40, 1000])
def test_suspect_rows_come_first_in_finding_order_then_the_partners_of_the_slow_nic(count: int):
    text = html_links(screen_document(count))
    rows = tables(text)["link-hosts"][1:]
    hosts = [row[0] for row in rows]
    assert_suspects_first(hosts)
    other_end = {name(7): name(8), name(8): name(7), name(9): name(11), name(11): name(9), name(5): name(6),
                 name(6): name(5)}
    assert rows[0][1] == "slow_nic fail"
    assert [row[1] for row in rows[1:7]] == [
        f"{kind} ↔ {other_end[row[0]]}" for kind, row in zip(
            ["slow_link fail"] * 2 + ["slow_link warn"] * 2 + ["link_error warn"] * 2, rows[1:7], strict=True)]
    # Then the others by their worst pair, which leaves out the slow NIC: its partners' pairs with it
    # (~44 % of the reference) are its fault, so no healthy host reads slow (all ~99-101 %).
    assert all(row[1] == "" for row in rows[7:])
    ratios = [float(row[5].rstrip(" %")) for row in rows[7:]]
    assert ratios == sorted(ratios) and min(ratios) > 97.0
    partners = {name((2 + step) % count) for step in (-2, -1, 1, 2)}
    for row in cells(text, "link-hosts"):
        if row[0]["text"] in partners:
            assert f"leaving out {name(2)}: explained by their own finding" in row[4]["title"], row[4]
            assert any(cell["text"] == f"{name(2)} {SLOW_NIC_GBPS:.1f}" for cell in row[7:])  # still shown


def test_a_host_row_shows_rails_worst_figure_ratios_partner_count_and_partner_cells():
    document = screen_document(12)
    rows = {row[0]: row for row in tables(html_links(document))["link-hosts"][1:]}
    slow = rows[name(2)]
    # Rail 0 has one run per pair: its reference is the median of its values.
    reference = statistics.median(e["value"] for e in document["links"] if e["rail"] == 0 and e["value"] is not None)
    assert slow[2:5] == ["0-3", "4", f"{SLOW_NIC_GBPS:.1f}"]
    assert slow[5] == f"{100 * SLOW_NIC_GBPS / reference:.1f} %"
    assert slow[6] == f"{SLOW_NIC_GBPS:.1f} %"  # of the 100 Gb/s line rate
    assert sorted(cell.split()[0] for cell in slow[7:]) == [name(0), name(1), name(3), name(4)]
    assert all(cell.endswith(f" {SLOW_NIC_GBPS:.1f}") for cell in slow[7:])


# ------------------------------------------------------------------------------------ at 1,000 hosts


def test_1000_hosts_show_every_suspect_then_a_fixed_number_and_count_the_folded_ones_exactly():
    count = 1000
    document = screen_document(count, rails=8)
    started = time.perf_counter()
    text = html_links(document)
    elapsed_s = time.perf_counter() - started
    assert len(text.encode()) < 400_000
    assert elapsed_s < 2.0  # well under 1 s on a workstation; slack for a loaded CI runner
    rows = tables(text)["link-hosts"][1:]
    suspects = SUSPECTS
    shown = [row[0] for row in rows]
    assert_suspects_first(shown)
    assert len(shown) == len(suspects) + OTHER_ROWS_SHOWN
    assert "link-matrix" not in tables(text)
    # 1000 hosts in the cycle: 2000 pairs, 8 rails; one pair without any figure.
    counts = paragraph(text, "link-counts")
    assert counts == ("1002 hosts in the sweep: 1000 pair-tested, 2 not tested · 2000 pairs measured "
                      f"({1999 * 8} pair-rail figures) in 8 groups · 1 pair could not be tested (8 pair-rails) · "
                      f"rows: {len(suspects)} suspect, {OTHER_ROWS_SHOWN} more shown, "
                      f"{count - len(suspects) - OTHER_ROWS_SHOWN} folded")
    folded = paragraph(text, "link-folded")
    match = re.fullmatch(r"(\d+) more hosts folded \((\d+) partner cells\), none named by a link finding and none "
                         r"with an error pair; their worst pairs: ([\d.]+)–([\d.]+) % of the reference, "
                         r"([\d.]+)–([\d.]+) Gbit/s\.", folded)
    assert match is not None, folded
    assert int(match.group(1)) == count - len(suspects) - OTHER_ROWS_SHOWN
    assert int(match.group(2)) == 4 * int(match.group(1))  # every folded host has its four partners
    # The folded hosts are exactly the ones not shown, and the ranges are theirs, computed here
    # from the document: per rail the reference is the median pair figure (one run per pair).
    names = re.search(r"<summary>folded hosts</summary><p>(.*?)</p>", text)
    assert names is not None
    folded_hosts = set(NodeSet(names.group(1)))
    assert folded_hosts == {name(i) for i in range(count)} - set(shown)
    worst = worst_by_host(document, leaving_out=frozenset({name(2)}))
    ratios = [worst[host][0] for host in folded_hosts]
    figures = [worst[host][1] for host in folded_hosts]
    assert match.group(3, 4) == (f"{100 * min(ratios):.1f}", f"{100 * max(ratios):.1f}")
    assert match.group(5, 6) == (f"{min(figures):.1f}", f"{max(figures):.1f}")
    # The rows shown are the 50 worst of the non-suspects.
    others = sorted((worst[host][0], host) for host in worst if host not in SUSPECTS)
    assert max(worst[host][0] for host in shown[len(suspects):]) <= min(ratios)
    assert [host for _, host in others[:OTHER_ROWS_SHOWN]] == shown[len(suspects):]


def test_1000_host_report_renders_in_every_format():
    document = screen_document(1000, rails=8)
    started = time.perf_counter()
    text = render_report(document, "html")
    assert time.perf_counter() - started < 3.0
    assert all(host in text for host in SUSPECTS)
    for fmt in ("text", "md"):
        assert "slowest" in render_report(document, fmt)


# -------------------------------------------------------------------------------- small-fleet matrix


def test_the_small_fleet_matrix_is_symmetric_with_suspects_first():
    count = 24
    assert count <= LINK_MATRIX_MAX_HOSTS
    text = html_links(screen_document(count))
    matrix = tables(text)["link-matrix"]
    hosts = matrix[0][1:]
    assert_suspects_first(hosts)
    assert len(hosts) == count
    assert [row[0] for row in matrix[1:]] == hosts
    grid = {(row[0], other): value for row in matrix[1:] for other, value in zip(hosts, row[1:], strict=True)}
    for a in hosts:
        assert grid[(a, a)] == "-"
        for b in hosts:
            assert grid[(a, b)] == grid[(b, a)]
    assert grid[(name(7), name(8))] == f"{SLOW_LINK_GBPS + 1.0:.1f}"  # median of the screen and confirm runs
    assert grid[(name(0), name(5))] == ""  # never paired
    assert sum(1 for value in grid.values() if value not in ("", "-")) == 2 * 2 * count
    # The rows hold every host of the matrix; nothing is folded at this size.
    assert [row[0] for row in tables(text)["link-hosts"][1:]] == hosts
    assert paragraph(text, "link-folded") == f"All {count} host rows are shown; none folded."


def test_above_the_matrix_limit_there_is_no_matrix():
    text = html_links(screen_document(LINK_MATRIX_MAX_HOSTS + 1))
    assert "link-matrix" not in tables(text) and "link-hosts" in tables(text)


# --------------------------------------------------------------------------- cells: errors, rails


def test_an_error_pair_shows_as_an_error_with_its_reason_never_as_zero():
    text = html_links(screen_document(12))
    row = next(row for row in cells(text, "link-hosts") if row[0]["text"] == name(5))
    error = next(cell for cell in row[7:] if cell["text"].startswith(name(6)))
    assert error["text"] == f"{name(6)} error" and error["class"] == "error"
    assert ERROR_REASON in error["title"] and "tcp rail 0 could not be tested" in error["title"]
    assert "0.0" not in error["text"]
    matrix = cells(text, "link-matrix")
    header = [cell["text"] for cell in matrix[0]]
    matrix_row = next(row for row in matrix if row[0]["text"] == name(5))
    assert matrix_row[header.index(name(6))]["text"] == "error"
    groups = tables(text)["link-groups"][1:]
    assert [row[4] for row in groups] == ["1"] * 4  # one pair could not be tested on each rail


def test_a_pair_that_failed_on_one_rail_only_is_an_error_with_the_other_rails_in_its_title():
    document = screen_document(12)
    for entry in document["links"]:
        if (entry["a"], entry["b"], entry["rail"]) == (name(10), name(11), 3):
            entry["value"], entry["error"] = None, "iperf3 exited 1"
    text = html_links(document)
    row = next(row for row in cells(text, "link-hosts") if row[0]["text"] == name(10))
    cell = next(cell for cell in row[7:] if cell["text"].startswith(name(11)))
    assert cell["text"] == f"{name(11)} error" and cell["class"] == "error"
    assert "tcp rail 3 could not be tested: iperf3 exited 1" in cell["title"]
    assert re.search(r"rails: 0 [\d.]+ \([−+][\d.]+ % (below|above)\), 1 [\d.]+ \([−+][\d.]+ % (below|above)\), "
                     r"2 [\d.]+ \([−+][\d.]+ % (below|above)\), 3 error$", cell["title"])
    # The host is now a suspect (an error pair, no finding): after the finding rows, before the rest.
    hosts = [row[0] for row in tables(text)["link-hosts"][1:]]
    # (node0011 already is one: an end of the warn slow_link.)
    assert hosts[len(SUSPECTS)] == name(10) and hosts[:len(SUSPECTS)].count(name(11)) == 1


def test_a_multi_rail_pair_shows_its_worst_rail_and_lists_every_rail_in_the_title():
    text = html_links(screen_document(12))
    row = next(row for row in cells(text, "link-hosts") if row[0]["text"] == name(7))
    pair = next(cell for cell in row[7:] if cell["text"].startswith(name(8)))
    assert pair["text"] == f"{name(8)} {SLOW_LINK_GBPS + 1.0:.1f}"
    assert f"worst tcp rail {SLOW_RAIL}: {SLOW_LINK_GBPS + 1.0:.1f} Gbit/s" in pair["title"]
    listed = re.search(r"rails: (.*)$", pair["title"])
    assert listed is not None
    assert [part.split()[0] for part in listed.group(1).split(", ")] == ["0", "1", "2", "3"]
    assert f"{SLOW_RAIL} {SLOW_LINK_GBPS + 1.0:.1f} (" in listed.group(1)
    assert "2 runs" in pair["title"] and "% of line rate" in pair["title"]
    assert row[4]["text"] == f"{SLOW_LINK_GBPS + 1.0:.1f}"  # the row's worst figure


def test_groups_are_never_pooled_a_slower_line_rate_has_its_own_reference():
    document = screen_document(12)
    # Rail 1 of every pair runs at 50 Gb/s line rate and about half the figure.
    for entry in document["links"]:
        if entry["rail"] == 1 and entry["value"] is not None:
            entry["line_rate_gbps"] = 50.0
            entry["value"] = entry["value"] / 2
    text = html_links(document)
    groups = {(row[1], row[2]): row for row in tables(text)["link-groups"][1:]}
    for rail, line in ((0, 100.0), (1, 50.0)):
        values = [e["value"] for e in document["links"] if e["rail"] == rail and e["value"] is not None]
        reference = statistics.median(values)
        row = groups[(str(rail), f"{line:g} Gb/s")]
        assert row[5:7] == [f"{reference:.1f} Gbit/s", f"{100 * reference / line:.1f} %"]
        assert 90 < 100 * reference / line < 95  # each group near its own line rate: neither pooled with the other
    # A healthy host's worst pair stays near 100 % of its group: rail 1's half figure is not slow.
    rows = {row[0]: row for row in tables(text)["link-hosts"][1:]}
    assert float(rows[name(10)][5].rstrip(" %")) > 98.0
    assert rows[name(10)][6] != "" and float(rows[name(10)][6].rstrip(" %")) > 90.0


def test_a_second_backend_is_its_own_group_and_a_link_fleet_shift_is_said():
    document = screen_document(12, rails=3)
    document["links"] += [{**link_entry(name(0), name(1), 0, 380.0, line_rate=400.0), "backend": "perftest"},
                          {**link_entry(name(1), name(2), 0, 390.0, line_rate=400.0), "backend": "perftest"}]
    document["findings"].append({**link_finding("fleet_shift", "warn", "tcp fabric", deficit=6.0, value=94.2,
                                                reference=100.0, evidence="every pair below line rate"),
                                 "reference_source": "line_rate", "metric": "link.tcp.rail0"})
    text = html_links(document)
    groups = [row[:2] + row[5:6] for row in tables(text)["link-groups"][1:]]
    assert groups[0] == ["perftest", "0", "385.0 Gbit/s"] and [row[0] for row in groups[1:]] == ["tcp"] * 3
    rows = {row[0]: row for row in tables(text)["link-hosts"][1:]}
    assert rows[name(1)][2] == "perftest 0; tcp 0-2"
    # perftest's 380 is 98.7 % of its own reference, never compared with tcp's 94.
    pair = next(cell for cell in next(r for r in cells(text, "link-hosts") if r[0]["text"] == name(0))[7:]
                if cell["text"].startswith(name(1)))
    assert "perftest rail 0 380.0 (−1.3 % below)" in pair["title"]
    assert "warn fleet shift link.tcp.rail0: the fabric&#x27;s median pair 94.2 vs line_rate 100.0 Gbit/s" in text


# ------------------------------------------------------------------------------ hosts not tested


def test_hosts_no_pair_test_reached_are_listed_with_the_reason():
    text = html_links(screen_document(12))
    rows = tables(text)["link-not-tested"][1:]
    assert sorted(rows) == sorted([
        [name(12), "1", "timeout: no answer in 600 s"],
        [name(13), "1", "left out of the link rounds: the hosts file gives no net= address for it"]])
    assert "2 not tested" in paragraph(text, "link-counts")


def test_without_links_the_section_says_so():
    document = screen_document(12)
    document["links"] = []
    text = render_report(document, "html")
    assert "no link measurements in this sweep" in text and "link-hosts" not in tables(text)
    assert "slowest pair" not in render_report(document, "text")
    assert "## Links" not in render_report(document, "md")


# ------------------------------------------------------------------------------------------ escaping


def test_a_host_name_with_markup_is_escaped_in_every_part_of_the_section():
    document = screen_document(12, names={2: EVIL, 6: f"{EVIL}6", 13: f"{EVIL}13"})
    document["findings"][0]["evidence"] = f'"><i>{EVIL}</i>'
    for entry in document["links"]:
        if entry["error"]:
            entry["error"] = f"<script>{EVIL}</script>"
    text = html_links(document)
    assert "<b>" not in text and "<script" not in text and "<i>" not in text
    assert "&lt;b&gt;x&lt;/b&gt;" in text
    parsed = tables(text)
    assert parsed["link-hosts"][1][0] == EVIL
    assert EVIL in parsed["link-matrix"][0]
    assert f"{EVIL}13" in [row[0] for row in parsed["link-not-tested"][1:]]
    error = next(row for row in cells(text, "link-hosts") if row[0]["text"] == f"{EVIL}6")
    assert any(f"could not be tested: <script>{EVIL}</script>" in cell.get("title", "") for cell in error[7:])


# ------------------------------------------------------------------------------------- text, markdown


def test_text_links_section_counts_pairs_and_lists_the_slowest_against_their_reference():
    text = render_report(screen_document(40, rails=8), "text")
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("links: "))
    section = lines[start:lines.index("hosts:")]
    assert all(len(line) <= 80 for line in section), [line for line in section if len(line) > 80]
    assert " ".join(line.strip() for line in section).startswith(
        "links: 80 pairs in 8 groups (backend, rail, line rate), 1 could not be tested; 40 hosts pair-tested, "
        "2 not tested")
    assert f"  tcp: 80 pairs on 8 rails, {79 * 8} figures, 1 pair (8 rails) not tested" in section
    entries = " ".join(line.strip() if line.startswith("      ") else f"\n{line.strip()}" for line in section)
    slowest = [entry.strip() for entry in entries.split("\n") if " Gbit/s (" in entry]
    assert len(slowest) == 10
    assert all(name(2) in line for line in slowest[:4])  # the slow NIC's pairs, then the slow link
    assert slowest[4].startswith(f"{name(7)} ↔ {name(8)}  rail {SLOW_RAIL}  {SLOW_LINK_GBPS + 1.0:.1f} vs ")
    assert re.search(r"vs [\d.]+ Gbit/s \(−[\d.]+ % below\), [\d.]+ % of line rate$", slowest[0])
    assert any(line.strip().startswith(f"{name(5)} ↔ {name(6)}  tcp rails 0-7: pair server") for line in section)
    assert f"  not tested: {name(40)} (1): timeout: no answer in 600 s" in section


def test_markdown_links_section_has_backend_slowest_and_error_tables():
    text = render_report(screen_document(40, rails=8), "md")
    assert "## Links" in text
    section = text[text.index("## Links"):text.index("## Hosts by status")]
    slowest = [line for line in section.splitlines() if "↔" in line and "Gbit/s" in line]
    assert len(slowest) == 10
    first = [cell.strip() for cell in slowest[0].strip("|").split("|")]
    assert first[0] == f"{name(0)} ↔ {name(2)}"  # four equal pairs of the slow NIC: by name
    assert first[2].endswith("Gbit/s") and first[3].endswith("Gbit/s") and first[4].endswith("% below")
    assert first[5] == f"{SLOW_NIC_GBPS:.1f} % of line rate"
    assert f"| {name(5)} ↔ {name(6)}" in section and "connection refused" in section
    assert "| tcp " in section
