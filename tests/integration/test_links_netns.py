"""``gpudiag sweep --links`` over real hosts and real links: six hosts in network namespaces, each with its own
sshd on a management bridge and a data port on a separate data bridge (``netns_hosts.py``). The sweep reaches
them over SSH and runs the tcp pair probes between their data addresses exactly as on a cluster; the faults
are rate limits and a dead port made with ``tc`` and ``ip``, which the analysis knows nothing of.

Every link runs at 200 Mbit/s (an htb class on both ends of each data veth), given to the sweep as the line
rate, so the figures are steady on a 2-core machine; a fault is a host or a pair held to 50 Mbit/s. Skips
where network namespaces cannot be made (no CAP_NET_ADMIN)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner
from netns_hosts import NetnsFleet, namespace_pids, requires_netns
from sshd_hosts import interrupt_in_second_link_round

from gpudiag.cli.main import main

pytestmark = requires_netns

LINE_RATE_MBIT = 200
SLOW_MBIT = 50
LINK_KINDS = ("slow_nic", "slow_link", "link_error", "fleet_shift")
# The node probes are not under test: six "hosts" on one machine's CPUs are not a fleet to compare, and the
# load of the test run must not make them starved nodes. The link thresholds stay as shipped.
NODE_THRESHOLDS = ('{"schema": "gpudiag.thresholds/1", "min_peers": {"value": 100000, "unit": "count"}, '
                 '"small_fleet_min_hosts": {"value": 100000, "unit": "count"}, '
                   '"host_load_per_cpu": {"value": 1000000, "unit": "ratio"}}')


def _files(fleet: NetnsFleet, tmp_path: Path) -> dict[str, Path]:
    known_hosts = fleet.write_known_hosts(tmp_path / "known_hosts")
    thresholds = tmp_path / "thresholds.json"
    thresholds.write_text(NODE_THRESHOLDS)
    return {"known_hosts": known_hosts, "config": fleet.write_ssh_config(tmp_path / "ssh_config", known_hosts),
            "hosts": fleet.write_hosts_file(tmp_path / "hosts", data_field=True), "thresholds": thresholds,
            "json": tmp_path / "sweep.json", "store": tmp_path / "gpudiag.db"}


def _argv(files: dict[str, Path], links: str, *extra: str) -> list[str]:
    """The sweep's arguments: facts only, then the link phase over the data addresses of the hosts file."""
    return ["sweep", "--hosts", str(files["hosts"]), "--ssh-config", str(files["config"]),
            "--known-hosts", str(files["known_hosts"]), "--python", sys.executable, "--probes", "facts",
            "--thresholds", str(files["thresholds"]), "--store", str(files["store"]), "--json", str(files["json"]),
            "-q", "--links", links, "--net-backend", "tcp", "--net-duration", "1", "--net-streams", "2",
            "--net-line-rate", f"{LINE_RATE_MBIT / 1000:g}", "--net-address", "field", *extra]


def _sweep(files: dict[str, Path], links: str = "screen") -> tuple[int, dict, str]:
    result = CliRunner().invoke(main, _argv(files, links), catch_exceptions=False)
    return result.exit_code, json.loads(files["json"].read_text()), result.output


def _pair_processes(fleet: NetnsFleet) -> list[str]:
    """Command lines of the pair servers and clients running in the fleet's own namespaces."""
    found = []
    for pid in {pid for namespace in fleet.namespaces() for pid in namespace_pids(namespace)}:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if " -m probes net-" in command:
            found.append(command)
    return found


def _link_findings(document: dict) -> list[dict]:
    return [f for f in document["findings"] if f["kind"] in LINK_KINDS]


def _ends(finding: dict) -> frozenset[str]:
    return frozenset(end for end in (finding["host"], finding["peer"]) if end)


def test_a_port_capped_at_a_quarter_of_its_rate_is_that_hosts_slow_nic_and_nothing_else_is_flagged(
        clean_netns_fleet: NetnsFleet, tmp_path: Path):
    fleet = clean_netns_fleet
    fleet.cap_all(LINE_RATE_MBIT)
    fleet.cap_host("node03", SLOW_MBIT)
    code, document, output = _sweep(_files(fleet, tmp_path))
    assert code == 1, output
    findings = _link_findings(document)
    assert len(findings) == 1, json.dumps(findings, indent=1)
    (nic,) = findings
    assert (nic["kind"], nic["host"], nic["severity"], nic["confirmed"]) == ("slow_nic", "node03", "fail", True)
    assert 70 <= nic["deficit_pct"] <= 80 and nic["unit"] == "Gbit/s"
    # a screen, then a confirm round that paired node03 with a third partner that passed elsewhere
    assert {link["phase"] for link in document["links"]} == {"screen", "confirm"}
    partners = {link["a"] if link["b"] == "node03" else link["b"] for link in document["links"]
                if "node03" in (link["a"], link["b"])}
    assert len(partners) >= 3
    healthy = [link["value"] for link in document["links"] if "node03" not in (link["a"], link["b"])]
    # healthy pairs run near the cap, far above node03's quarter (on two busy cores a tbf-shaped pair was seen
    # at 88 % of it, which the analysis rightly did not flag)
    assert healthy and all(0.75 * LINE_RATE_MBIT / 1000 <= value <= LINE_RATE_MBIT / 1000 for value in healthy)
    assert document["impact"]["exclude"] == ["node03"]


def test_one_slow_path_between_two_hosts_is_a_slow_link_for_exactly_that_pair(
        clean_netns_fleet: NetnsFleet, tmp_path: Path):
    fleet = clean_netns_fleet
    fleet.cap_all(LINE_RATE_MBIT)
    fleet.cap_pair("node04", "node05", SLOW_MBIT)  # both fine with everyone else
    code, document, output = _sweep(_files(fleet, tmp_path))
    assert code == 1, output
    (link,) = _link_findings(document)
    assert link["kind"] == "slow_link" and _ends(link) == {"node04", "node05"}
    assert link["confirmed"] and link["severity"] == "fail" and "both ends fine with other partners" in link["evidence"]
    runs = [x["value"] for x in document["links"] if {x["a"], x["b"]} == {"node04", "node05"}]
    assert len(runs) >= 2 and all(value < 0.3 * LINE_RATE_MBIT / 1000 for value in runs)  # re-tested, slow again


def test_a_host_whose_data_port_is_dead_is_a_link_error_with_each_partner_and_the_sweep_completes(
        clean_netns_fleet: NetnsFleet, tmp_path: Path):
    fleet = clean_netns_fleet
    fleet.cap_all(LINE_RATE_MBIT)
    fleet.cut_data("node06")  # SSH (management) still reaches it; its data port carries nothing
    started = time.monotonic()
    code, document, output = _sweep(_files(fleet, tmp_path))
    assert time.monotonic() - started < 120
    assert code == 3, output  # not a pass, and not a fail either: a pair that could not be tested
    assert {host["host"]: host["status"] for host in document["hosts"]} == dict.fromkeys(fleet.host_names(), "ok")
    # node06's screen partners were measured with others: one finding for node06, not one per pair
    (found,) = _link_findings(document)
    assert (found["kind"], found["host"], found["peer"], found["severity"]) == ("link_error", "node06", None, "warn")
    assert "could not be tested with any of its 2 partners" in found["evidence"]
    assert document["impact"]["exclude"] == ["node06"]  # kept out of a job: its data port was never tested
    errors = [link for link in document["links"] if link["value"] is None]
    assert errors and all("node06" in (link["a"], link["b"]) and link["error"] for link in errors)
    measured = [link for link in document["links"] if link["value"] is not None]
    assert measured and all("node06" not in (link["a"], link["b"]) for link in measured)


def test_ctrl_c_during_a_link_round_writes_the_partial_document_exits_130_and_leaves_no_pair_process(
        clean_netns_fleet: NetnsFleet, tmp_path: Path):
    fleet = clean_netns_fleet
    fleet.cap_all(LINE_RATE_MBIT)
    files = _files(fleet, tmp_path)
    process = subprocess.Popen([sys.executable, "-m", "gpudiag", *_argv(files, "full")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    code, stderr, seconds = interrupt_in_second_link_round(process, fleet, first_round_pairs=3)  # 6-host round robin
    assert code == 130, stderr
    assert seconds < 20
    document = json.loads(files["json"].read_text())
    assert document["summary"]["exit_code"] == 130
    assert {host["host"] for host in document["hosts"]} == set(fleet.host_names())
    # round 1's three pairs finished and are kept; no verdict is drawn from the cut schedule
    assert len([link for link in document["links"] if link["value"] is not None]) >= 3
    assert not _link_findings(document)
    time.sleep(1.0)
    assert _pair_processes(fleet) == []
