"""``gpudiag preflight`` on a simulated fleet (and on this machine for the budget's wall clock):
exit codes 0/1/3, the plan printed first, the drain command it would run, $SLURM_JOB_NODELIST as
the hosts, the exclude file, bad input; a scontrol of the test's own for drain and undrain (NHC's
rule, a hung scontrol, an output that fails after a drain); a node that prints nothing."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from gpudiag.cli.main import main
from gpudiag.preflight.run import SCONTROL_FLOOR_S, START_QUERY_S
from gpudiag.slurm.nodelock import lock_nodes
from gpudiag.slurm.reason import mark_reason
from gpudiag.slurm.resume import current_user

SLOW_N2 = {"kind": "slow_gpu", "host": "n2", "gpu": 3, "factor": 0.7}
HUNG_N3 = {"kind": "hang", "host": "n3"}


def _fleet(tmp_path: Path, *faults: dict[str, Any], nodes: int = 4) -> Path:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"nodes": nodes, "name_format": "n{}", "faults": list(faults)}))
    return path


def _preflight(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, ["preflight", "--no-store", "-q", *args], catch_exceptions=False,
                              env={"SLURM_JOB_NODELIST": "", "SLURM_NODELIST": "", "SLURM_JOB_ID": "", **(env or {})})


def _lines(result: Result) -> list[str]:
    return result.stdout.splitlines()


def test_a_healthy_job_exits_0_with_the_plan_first_and_one_summary_line_last(tmp_path):
    result = _preflight("--simulate", str(_fleet(tmp_path)))
    assert result.exit_code == 0, result.output
    lines = _lines(result)
    assert lines[0] == "pre-flight plan: 4 nodes within a budget of 120 s (120 s planned)"
    assert lines[1].startswith("  node probes: facts, telemetry, gemm, membw, 2.0 s of load")
    assert any(line.startswith("  link screen: 3 rounds") for line in lines)
    assert lines[-1].startswith("gpudiag preflight: healthy n[1-4], exit 0, in ")
    assert "\x1b[" not in result.stdout and "┃" not in result.stdout  # plain lines, not on a terminal
    assert "would run" not in result.stdout


def test_a_fail_finding_exits_1_and_says_the_drain_command_it_would_run(tmp_path):
    result = _preflight("--simulate", str(_fleet(tmp_path, SLOW_N2)))
    assert result.exit_code == 1, result.output
    would = [line for line in _lines(result) if line.startswith("would run: ")]
    assert len(would) == 1
    assert would[0].startswith("would run: scontrol update NodeName=n2 State=DRAIN 'Reason=gpudiag: gemm: slow_gpu "
                               "GPU 3 gemm.tflops -30 % below")
    summary = _lines(result)[-1]
    assert summary.startswith("gpudiag preflight: FAIL n2, exit 1, ")
    assert "n2 slow_gpu GPU 3 gemm.tflops -30 % below" in summary
    assert summary.endswith(". Not drained without --drain: n2")


def test_one_node_is_judged_against_the_sku_figures(tmp_path):
    fleet = _fleet(tmp_path, SLOW_N2)
    failing, healthy = _preflight("--simulate", str(fleet), "--hosts", "n2"), \
        _preflight("--simulate", str(fleet), "--hosts", "n1")
    assert (failing.exit_code, healthy.exit_code) == (1, 0), failing.output + healthy.output
    assert "link screen" not in failing.stdout  # one node: no pairs
    assert _lines(healthy)[-1].startswith("gpudiag preflight: healthy n1, exit 0, ")


def test_a_hung_node_is_unchecked_exit_3_and_drains_nothing(tmp_path):
    result = _preflight("--simulate", str(_fleet(tmp_path, HUNG_N3)), "--json", str(tmp_path / "out.json"))
    assert result.exit_code == 3, result.output
    document = json.loads((tmp_path / "out.json").read_text())
    assert {h["host"]: h["status"] for h in document["hosts"]}["n3"] == "timeout"
    finding = next(f for f in document["findings"] if f["host"] == "n3")
    assert finding["kind"] == "unchecked" and "not finished within the --budget 120 s" in finding["evidence"]
    assert document["preflight"]["drain"] == []
    assert "would run" not in result.stdout
    assert _lines(result)[-1].startswith("gpudiag preflight: inconclusive, exit 3, ")
    assert _lines(result)[-1].endswith(". Nothing drained")


def test_json_to_stdout_moves_the_plan_and_summary_to_stderr(tmp_path):
    result = _preflight("--simulate", str(_fleet(tmp_path, SLOW_N2)), "--json", "-")
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["schema"] == "gpudiag.sweep/1" and document["summary"]["exit_code"] == 1
    part = document["preflight"]
    assert part["plan"]["budget_s"] == 120 and part["plan"]["links"] is True
    assert [command["ran"] for command in part["drain"]] == [False]
    assert part["drain"][0]["command"].startswith("scontrol update NodeName=n2 State=DRAIN")
    assert result.stderr.startswith("pre-flight plan: 4 nodes")
    assert result.stderr.splitlines()[-1].startswith("gpudiag preflight: FAIL n2, exit 1, ")


def test_the_exclude_file_and_prom_file_name_the_failed_node(tmp_path):
    exclude, prom = tmp_path / "exclude.txt", tmp_path / "preflight.prom"
    result = _preflight("--simulate", str(_fleet(tmp_path, SLOW_N2)), "--exclude-file", str(exclude),
                        "--prom-file", str(prom))
    assert result.exit_code == 1
    assert exclude.read_text() == "n2\n"
    assert 'gpudiag_finding{' in prom.read_text() and 'host="n2"' in prom.read_text()


def test_the_hosts_default_to_the_jobs_node_list(tmp_path):
    result = _preflight("--simulate", str(_fleet(tmp_path, SLOW_N2)), env={"SLURM_JOB_NODELIST": "n[3-4]"})
    assert result.exit_code == 0, result.output
    assert _lines(result)[0].startswith("pre-flight plan: 2 nodes")
    assert _lines(result)[-1].startswith("gpudiag preflight: healthy n[3-4], exit 0, ")


def test_a_small_budget_drops_what_does_not_fit_and_says_so(tmp_path):
    result = _preflight("--simulate", str(_fleet(tmp_path)), "--budget", "45")
    assert result.exit_code == 0, result.output
    assert "  not planned: link screen (the budget leaves no time for it)" in _lines(result)
    assert "pair tests" not in result.stdout


def test_without_a_window_for_the_retest_a_quick_first_pass_still_confirms_a_slow_gpu(tmp_path):
    """45 s keeps no re-test window for one node (a health check must end within slurmd's 60 s),
    yet a first pass that took a fraction of it leaves the time: the suspect is confirmed and fails."""
    result = _preflight("--simulate", str(_fleet(tmp_path, SLOW_N2)), "--hosts", "n2", "--budget", "45")
    assert any(line.startswith("  not planned: re-test of suspects") for line in _lines(result)), result.output
    assert result.exit_code == 1, result.output
    assert _lines(result)[-1].startswith("gpudiag preflight: FAIL n2, exit 1, ")


def test_with_no_retest_a_slow_gpu_is_inconclusive_never_healthy_and_drains_nothing(tmp_path):
    result = _preflight("--simulate", str(_fleet(tmp_path, SLOW_N2)), "--no-retest")
    assert result.exit_code == 3, result.output
    assert "gemm.tflops was 30" in result.stdout and "it was not re-tested (--no-retest)" in result.stdout
    assert "would run" not in result.stdout
    assert _lines(result)[-1].startswith("gpudiag preflight: inconclusive, exit 3, ")


@pytest.mark.parametrize(("args", "message"), [
    (("--budget", "10"), "--budget 10: too short"),
    (("--hosts", "n[1-"), "--hosts 'n[1-'"),
    (("--here", "--hosts", "n[1-2]"), "--here probes this machine: name it as one host, not 2"),
    (("--no-store", "--baseline", "x"), "--no-store reads no store"),
    ((), "no hosts"),
])
def test_bad_input_is_exit_2_with_one_line(tmp_path, args, message):
    fleet = ("--simulate", str(_fleet(tmp_path))) if args and args[0] in ("--budget", "--no-store") else ()
    result = _preflight(*fleet, *args)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line]
    assert len(errors) == 1 and errors[0].startswith("gpudiag: error: ") and message in errors[0], result.stderr
    assert "pre-flight plan" not in result.stdout


def _fake_scontrol(tmp_path: Path, shown: str, on_update: str = ":") -> tuple[Path, Path]:
    """A scontrol that logs each call to ``calls``, answers ``show node`` with the lines ``shown``
    and runs the shell ``on_update`` on ``update``; (its folder, for PATH, and the calls file)."""
    calls = tmp_path / "calls"
    (tmp_path / "shown").write_text(shown + "\n")
    scontrol = tmp_path / "bin" / "scontrol"
    scontrol.parent.mkdir(exist_ok=True)
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n'
                        f'if [ "$1" = show ]; then cat {tmp_path / "shown"}; fi\n'
                        f'if [ "$1" = update ]; then {on_update}; fi\n')
    scontrol.chmod(0o755)
    return scontrol.parent, calls


def _drained_by_gpudiag(name: str, reason: str) -> str:
    """``scontrol show node -o``'s line for a node gpudiag drained a moment ago, as gpudiag asks for it
    (SLURM_TIME_FORMAT=%s): its reason marked, Slurm's stamp naming this user and the present."""
    return f"NodeName={name} State=IDLE+DRAIN Reason={mark_reason(reason)} [{current_user()}@{int(time.time())}]"


def _running(pid: int) -> bool:
    """True while ``pid`` runs (not gone, not a zombie)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def test_drain_and_undrain_call_scontrol_only_for_fail_and_for_nodes_gpudiag_drained(tmp_path, monkeypatch):
    # n1 and n3 were drained by gpudiag for their GEMM, n4 by hand; all three pass now
    folder, calls = _fake_scontrol(tmp_path, "\n".join([
        _drained_by_gpudiag("n1", "gpudiag: gemm: slow_gpu GPU 1 gemm.tflops -20%: x"),
        _drained_by_gpudiag("n3", "gpudiag: gemm: slow_gpu GPU 1 gemm.tflops -20%"),
        "NodeName=n4 State=IDLE+DRAIN Reason=bad cable [alice@1795944394]"]))
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    result = _preflight("--simulate", str(_fleet(tmp_path, SLOW_N2)), "--drain", "--undrain")
    assert result.exit_code == 1, result.output
    ran = calls.read_text().splitlines()
    assert ran[0] == "show node -o n[1-4]"  # every node of the run, before it measures anything
    assert ran[1].startswith("update NodeName=n2 State=DRAIN Reason=gpudiag: gemm: slow_gpu GPU 3")
    assert re.search(r" gpudiag-drain=[0-9]{8}T[0-9]{6}Z-[0-9a-f]{4}$", ran[1]), ran[1]
    assert ran[2] == "show node -o n[1-4]"
    assert ran[3:] == ["update NodeName=n[1,3] State=RESUME"]
    lines = _lines(result)
    assert any(line.startswith("drained: scontrol update NodeName=n2 State=DRAIN") for line in lines)
    assert "returned to service: scontrol update 'NodeName=n[1,3]' State=RESUME" in lines
    assert any(line.startswith("left drained: n4: drained by someone else") for line in lines)
    assert lines[-1].endswith(". Drained n2. Returned to service n[1,3]. Left drained n4"), lines[-1]


@pytest.mark.parametrize(("reason", "args", "missing"), [
    ("gpudiag: gemm: slow_gpu GPU 1 gemm.tflops -20%", ("--budget", "30"), "gemm"),  # the budget planned no GEMM
    ("gpudiag: links: slow_nic link.tcp -40%: slow with every partner", (), "links"),  # one node: no link test
    ("gpudiag: slow_nic link.tcp -40%: slow with every partner", (), "links"),  # the same, in the older form
])
def test_undrain_never_resumes_a_node_on_a_run_that_could_not_see_its_fault(tmp_path, monkeypatch, reason, args,
                                                                              missing):
    folder, calls = _fake_scontrol(tmp_path, _drained_by_gpudiag("n1", reason))
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    result = _preflight("--simulate", str(_fleet(tmp_path)), "--hosts", "n1", "--undrain", *args)
    assert result.exit_code == 0, result.output  # healthy, as far as this run could see
    assert calls.read_text().splitlines() == ["show node -o n1"] * 2  # at its start and its end; no RESUME
    assert (f"left drained: n1: drained by gpudiag for {missing}; this run made and passed no {missing} check on "
            f"it, so it could not see that fault: left drained") in _lines(result)
    assert _lines(result)[-1].endswith(". Left drained n1")


GONE_N1 = {"kind": "gpu_missing", "host": "n1", "gpu": 2}


def test_in_a_job_a_gpu_gone_from_a_lone_nodes_bus_is_missing_by_the_gpus_slurm_gives_it(tmp_path, monkeypatch):
    # One node, no store: its PCI bus, NVML and torch all count 7, and only Slurm's Gres says 8.
    folder, calls = _fake_scontrol(tmp_path, "NodeName=n1 Arch=x86_64 Gres=gpu:h100:8(S:0-1) NodeAddr=n1 State=IDLE")
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    fleet = str(_fleet(tmp_path, GONE_N1, nodes=1))
    outside = _preflight("--simulate", fleet, "--hosts", "n1")
    assert outside.exit_code == 0 and not calls.exists(), outside.output  # outside a job Slurm is not asked
    result = _preflight("--simulate", fleet, "--hosts", "n1", "--drain", "--json", str(tmp_path / "doc.json"),
                        env={"SLURM_JOB_ID": "7"})
    assert result.exit_code == 1, result.output
    ran = calls.read_text().splitlines()
    assert ran[0] == "show node -o n1" and ran[1].startswith("update NodeName=n1 State=DRAIN Reason=gpudiag: ")
    (finding,) = json.loads((tmp_path / "doc.json").read_text())["findings"]
    assert (finding["kind"], finding["severity"], finding["host"]) == ("missing_gpu", "fail", "n1")
    assert finding["evidence"].endswith("expected 8: on the PCI bus 7; counted by NVML 7; "
                                        "Slurm's configuration (Gres) gives it 8")
    # every GPU there: nothing found, and Slurm asked once
    whole = _preflight("--simulate", str(_fleet(tmp_path, nodes=1)), "--hosts", "n1", env={"SLURM_JOB_ID": "7"})
    assert whole.exit_code == 0, whole.output
    assert calls.read_text().splitlines()[2:] == ["show node -o n1"]


def test_a_slurm_that_does_not_say_the_nodes_gpus_is_a_warning_never_a_missing_gpu(tmp_path, monkeypatch):
    folder, calls = _fake_scontrol(tmp_path, "")
    (folder / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n'
                                     'echo "slurm_load_node error: Unable to contact slurm controller" >&2\nexit 1\n')
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    result = _preflight("--simulate", str(_fleet(tmp_path, nodes=1)), "--hosts", "n1", "--json",
                        str(tmp_path / "doc.json"), env={"SLURM_JOB_ID": "7"})
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "doc.json").read_text())
    assert document["findings"] == []
    (warning,) = [w for w in document["warnings"] if "GPUs each node is configured with" in w]
    assert "Unable to contact slurm controller" in warning and warning.endswith("judged without it")
    assert calls.read_text().splitlines() == ["show node -o n1"]


PRINTS_NOTHING = "/bin/true"


@pytest.mark.parametrize("python", [PRINTS_NOTHING, "facts only"])
def test_a_node_whose_python_prints_no_record_or_only_its_facts_is_inconclusive_and_never_resumed(
        tmp_path, monkeypatch, python):
    if python != PRINTS_NOTHING:  # the real bundle, of whose records only the facts reach gpudiag
        wrapper = tmp_path / "python"
        wrapper.write_text(f'#!/bin/sh\nif [ "$1" = -m ]; then {sys.executable} "$@" | grep \'"probe": "facts"\'; '
                           f'exit 0; fi\nexec {sys.executable} "$@"\n')
        wrapper.chmod(0o755)
        python = str(wrapper)
    folder, calls = _fake_scontrol(tmp_path, _drained_by_gpudiag("localhost",
                                                                 "gpudiag: telemetry: ecc GPU 0: 2 uncorrectable"))
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    result = _preflight("--here", "--hosts", "localhost", "--python", python, "--budget", "30", "--undrain",
                        "--drain", "--json", str(tmp_path / "out.json"))
    assert result.exit_code == 3, result.output
    assert calls.read_text().splitlines() == ["show node -o localhost"] * 2  # neither drained nor resumed
    summary = _lines(result)[-1]
    assert summary.startswith("gpudiag preflight: inconclusive, exit 3, ") and "healthy" not in summary
    kept = next(line for line in _lines(result) if line.startswith("left drained: localhost: "))
    assert "drained by gpudiag for telemetry; it does not pass this run" in kept
    document = json.loads((tmp_path / "out.json").read_text())
    assert document["summary"]["exit_code"] == 3 and document["preflight"]["undrain"]["resumed"] == []


def test_a_json_document_that_cannot_be_written_after_a_drain_says_the_drain_and_exits_1(tmp_path, monkeypatch):
    """The drain happened: a hook must see the fail, and the summary which node was drained."""
    out = tmp_path / "out"
    out.mkdir()
    # the document's folder goes while the drain runs (as a full or read-only disk would fail the write)
    folder, calls = _fake_scontrol(tmp_path, "", on_update=f"rm -rf {out}")
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    result = _preflight("--simulate", str(_fleet(tmp_path, SLOW_N2)), "--drain", "--json", str(out / "doc.json"))
    assert result.exit_code == 1, result.output
    assert calls.read_text().startswith("update NodeName=n2 State=DRAIN")
    summary = _lines(result)[-1]
    assert summary.startswith("gpudiag preflight: FAIL n2, exit 1, ")
    assert ". Drained n2. Not written: --json " in summary, summary
    assert any(line.startswith(f"gpudiag: error: --json {out / 'doc.json'}: cannot write the report")
               for line in result.stderr.splitlines()), result.stderr


def test_without_a_drain_an_output_that_cannot_be_written_is_exit_2_and_the_outcome_is_still_said(
        tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    folder, _ = _fake_scontrol(tmp_path, "NodeName=n1 State=IDLE Reason=(null)")
    (folder / "scontrol").write_text(f"#!/bin/sh\nrm -rf {out}\n")  # the folder goes while the node is read
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    result = _preflight("--simulate", str(_fleet(tmp_path)), "--hosts", "n1", "--undrain", "--exclude-file",
                        str(out / "exclude"))
    assert result.exit_code == 2, result.output
    assert _lines(result)[-1].startswith("gpudiag preflight: healthy n1, exit 0, ")
    assert ". Not written: --exclude-file " in _lines(result)[-1]


def test_node_error_text_never_breaks_the_summary_line_nor_carries_shell_characters(tmp_path):
    hostile = "CUDA error\n$(touch /tmp/gpudiag-x) `id` \\ 'q' \"dq\";|&<>\x1b[2J"
    fleet = _fleet(tmp_path, {"kind": "probe_error", "host": "n1", "probe": "gemm", "gpu": 1, "reason": hostile},
                   {"kind": "probe_error", "host": "n2", "probe": "telemetry", "gpu": 3,
                    "reason": "GPU has fallen off the bus\n" + hostile})
    failing = _preflight("--simulate", str(fleet))  # n2's GPU is lost: a fail
    inconclusive = _preflight("--simulate", str(fleet), "--hosts", "n1")  # n1's GEMM failed: unchecked
    assert (failing.exit_code, inconclusive.exit_code) == (1, 3), failing.output + inconclusive.output
    for result in (failing, inconclusive):
        summary = result.stdout.rstrip("\n").rsplit("\n", 1)[-1]
        assert summary.startswith("gpudiag preflight: "), result.output
        assert re.fullmatch(r"[A-Za-z0-9 .,:=_+/%@\[\]-]+", summary), summary
    assert "n1 unchecked: gemm failed on cuda:1: CUDA error touch /tmp/gpudiag-x id" in _lines(inconclusive)[-1]
    would = next(line for line in _lines(failing) if line.startswith("would run: "))
    reason = would.split("'Reason=", 1)[1].rstrip("'")
    assert reason.startswith("gpudiag: facts,telemetry: missing_gpu GPU 3: NVML reports gpu:3 lost: GPU has fallen "
                             "off the bus CUDA error touch /tm")
    assert re.fullmatch(r"[A-Za-z0-9 .,:=_+/%@-]+", reason), reason


def test_the_budget_ends_a_hung_node_and_a_hung_scontrol_in_time_exit_3(tmp_path):
    """A node that hangs spends the budget; the scontrol that then hangs too (the node query of
    --undrain, after it answered at the check's start) gets SCONTROL_FLOOR_S, not its minute, and
    is ended with what it started."""
    python = tmp_path / "python"  # the node's Python hangs in the probes
    python.write_text(f'#!/bin/sh\nif [ "$1" = -m ]; then exec sleep 600; fi\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    pids = tmp_path / "scontrol-pids"
    answered = tmp_path / "answered"
    hung = tmp_path / "scontrol"  # it answers once (no such node), then starts a child and waits: both ended
    hung.write_text(f"#!/bin/sh\nif [ ! -e {answered} ]; then touch {answered}; exit 0; fi\n"
                    f"echo $$ >> {pids}\nsleep 300 &\necho $! >> {pids}\nwait\n")
    hung.chmod(0o755)
    started = time.monotonic()
    result = _preflight("--here", "--hosts", "localhost", "--python", str(python), "--budget", "30",
                        "--undrain", "--scontrol", str(hung), "--json", str(tmp_path / "out.json"))
    elapsed = time.monotonic() - started
    assert result.exit_code == 3, result.output
    assert elapsed <= 30 + SCONTROL_FLOOR_S + 10, elapsed  # not the scontrol's own minute
    document = json.loads((tmp_path / "out.json").read_text())
    assert [(h["host"], h["status"]) for h in document["hosts"]] == [("localhost", "timeout")]
    assert "node probes not finished within the --budget 30 s" in document["hosts"][0]["error"]
    assert "did not answer within" in document["preflight"]["undrain"]["error"]
    summary = _lines(result)[-1]
    assert summary.startswith("gpudiag preflight: inconclusive, exit 3, ")
    assert ". Undrain failed: " in summary and "was ended" in summary
    started_pids = [int(pid) for pid in pids.read_text().split()]
    assert len(started_pids) == 2 and not any(_running(pid) for pid in started_pids)


def test_a_scontrol_that_does_not_answer_at_the_start_costs_seconds_and_resumes_nothing(tmp_path):
    """The node query before the first measurement gets START_QUERY_S; without its answer no
    drain can be shown to predate the check, so nothing is resumed and Slurm is not asked again."""
    calls = tmp_path / "calls"
    hung = tmp_path / "scontrol"
    hung.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\nexec sleep 300\n")
    hung.chmod(0o755)
    started = time.monotonic()
    result = _preflight("--here", "--hosts", "localhost", "--python", "/bin/true", "--budget", "30", "--undrain",
                        "--scontrol", str(hung), "--json", str(tmp_path / "out.json"))
    assert result.exit_code == 3, result.output
    assert time.monotonic() - started < START_QUERY_S + 20
    assert calls.read_text().splitlines() == ["show node -o localhost"]
    undrain = json.loads((tmp_path / "out.json").read_text())["preflight"]["undrain"]
    assert undrain["resumed"] == [] and undrain["error"].startswith("at this check's start: ")
    assert "did not answer within 5 s and was ended" in undrain["error"]


def test_an_interrupted_check_exits_130_and_drains_nothing(tmp_path):
    python = tmp_path / "python"  # the probes hang, so Ctrl-C lands while they run
    python.write_text(f'#!/bin/sh\nif [ "$1" = -m ]; then exec sleep 600; fi\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    calls = tmp_path / "calls"
    scontrol = tmp_path / "bin" / "scontrol"
    scontrol.parent.mkdir()
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    scontrol.chmod(0o755)
    env = {**os.environ, "PATH": f"{scontrol.parent}:{os.environ['PATH']}"}
    check = subprocess.Popen([sys.executable, "-m", "gpudiag", "preflight", "--here", "--hosts", "localhost",
                              "--python", str(python), "--no-store", "-q", "--drain", "--undrain"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180  # however busy the machine, the interrupt lands while the probes run
    while not (hanging := _probes_hang(check.pid)) and time.monotonic() < deadline and check.poll() is None:
        time.sleep(0.1)
    assert hanging, "the probes never started"
    check.send_signal(signal.SIGINT)
    stdout, stderr = check.communicate(timeout=60)
    assert check.returncode == 130, stderr
    assert stdout.splitlines()[-1].startswith("gpudiag preflight: interrupted, exit 130, ")
    assert calls.read_text().splitlines() == ["show node -o localhost"]  # asked at the start; no drain, no resume


def _probes_hang(root: int) -> bool:
    """True once a ``sleep 600`` (the fake Python's probes) runs below ``root`` in the process
    tree: another test's sleep is not ours."""
    parents: dict[int, int] = {}
    sleeping = []
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit():
                continue
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            if (entry / "cmdline").read_bytes() == b"sleep\x00600\x00":
                sleeping.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    for pid in sleeping:
        seen = set()
        while pid in parents and pid not in seen:
            seen.add(pid)
            pid = parents[pid]
            if pid == root:
                return True
    return False


def test_a_node_printing_one_endless_line_is_cut_at_the_output_cap_and_inconclusive(tmp_path):
    """preflight takes the sweep's output caps: past --max-output-mib the node is probe_error
    naming the cap, at once, never healthy."""
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\nif [ \"$1\" = -m ]; then exec yes '{\"probe\":\"x'; fi\n"
                      f"exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    started = time.monotonic()
    result = _preflight("--here", "--hosts", "localhost", "--python", str(python), "--budget", "30",
                        "--max-output-mib", "2", "--max-line-kib", "64")
    assert result.exit_code == 3, result.output
    assert time.monotonic() - started < 25  # cut at the cap, not at the budget
    summary = _lines(result)[-1]
    assert summary.startswith("gpudiag preflight: inconclusive, exit 3, ") and "probe_error" in summary
    assert "the cap: 2 MiB of output, 64 KiB a line" in summary, summary


def test_a_confirmed_slow_node_is_drained_and_a_slow_link_drains_neither_end(tmp_path):
    # a host-side slowdown on every GPU of n3 costs every job there: drained until checked; the
    # link n1-n2 is slow while neither end can be blamed: both are kept out of the job, neither drained
    fleet = _fleet(tmp_path, {"kind": "slow_node", "host": "n3", "factor": 0.7},
                   {"kind": "slow_link", "a": "n1", "b": "n2", "factor": 0.5}, nodes=8)
    exclude = tmp_path / "exclude.txt"
    result = _preflight("--simulate", str(fleet), "--exclude-file", str(exclude))
    assert result.exit_code == 1, result.output
    would = [line for line in _lines(result) if line.startswith("would run: ")]
    assert len(would) == 1 and would[0].startswith("would run: scontrol update NodeName=n3 State=DRAIN "
                                                   "'Reason=gpudiag: gemm: slow_node"), would
    assert exclude.read_text().split() == ["n1", "n2", "n3"]
    assert _lines(result)[-1].startswith("gpudiag preflight: FAIL n[1-3], exit 1, ")  # the pair's both ends


def test_hosts_unchecked_alike_are_one_reason_in_the_summary_line(tmp_path):
    hung = [{"kind": "hang", "host": f"n{number}"} for number in (2, 3, 4, 5)]
    result = _preflight("--simulate", str(_fleet(tmp_path, *hung, nodes=6)))
    assert result.exit_code == 3, result.output
    summary = _lines(result)[-1]
    assert summary.startswith("gpudiag preflight: inconclusive, exit 3, ")
    # one reason for the four (a Slurm-safe line: the folded set's brackets become spaces)
    assert "n 2-5 unchecked: timeout" in summary and "more" not in summary and "n3 unchecked" not in summary


def test_a_second_check_of_a_node_another_check_holds_is_inconclusive_and_runs_nothing(tmp_path, monkeypatch):
    """Two checks never load one node at once: while one holds localhost's lock, a second probes
    nothing (its node Python never starts), drains and resumes nothing, and says whose the node is.
    Exit 3: the node could not be checked now; never 0, which a health check's --undrain or a
    prolog would read as healthy."""
    monkeypatch.setenv("GPUDIAG_LOCK_DIR", str(tmp_path / "locks"))
    ran = tmp_path / "ran"
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\necho "$@" >> {ran}\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    folder, calls = _fake_scontrol(tmp_path, _drained_by_gpudiag("localhost", "gpudiag: gemm: slow_gpu GPU 1"))
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    held = lock_nodes(["localhost"], tmp_path / "locks", holder="gpudiag preflight localhost")
    try:
        result = _preflight("--here", "--hosts", "localhost", "--python", str(python), "--budget", "30", "--drain",
                            "--undrain", "--json", str(tmp_path / "out.json"))
    finally:
        held.release()  # type: ignore[union-attr]
    assert result.exit_code == 3, result.output
    assert not ran.exists() and not calls.exists()  # nothing loaded, drained, asked or resumed
    summary = _lines(result)[-1]
    assert summary.startswith("gpudiag preflight: inconclusive, exit 3, ") and summary.endswith(". Nothing drained")
    assert ("localhost unchecked: not probed, nothing loaded: another gpudiag check holds localhost "
            f"pid={os.getpid()} since=") in summary, summary
    document = json.loads((tmp_path / "out.json").read_text())
    assert document["summary"]["exit_code"] == 3 and document["hosts"] == []
    assert document["preflight"]["undrain"] is None and document["preflight"]["drain"] == []
    # once the other check has ended, the node is checked
    result = _preflight("--here", "--hosts", "localhost", "--python", str(python), "--budget", "30")
    assert ran.exists() and "another gpudiag check" not in result.stdout


def test_a_lock_folder_another_user_could_write_makes_the_check_inconclusive(tmp_path, monkeypatch):
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o777)
    locks.chmod(0o777)
    monkeypatch.setenv("GPUDIAG_LOCK_DIR", str(locks))
    result = _preflight("--here", "--hosts", "localhost", "--python", "/bin/true", "--budget", "30")
    assert result.exit_code == 3, result.output
    assert "not probed, nothing loaded: the node lock folder " in _lines(result)[-1]


def test_a_simulated_fleet_takes_no_node_lock(tmp_path, monkeypatch):
    """A simulated node loads no GPU: a check of it runs beside a real check of the same name."""
    monkeypatch.setenv("GPUDIAG_LOCK_DIR", str(tmp_path / "locks"))
    with lock_nodes(["n1"], tmp_path / "locks"):  # type: ignore[union-attr]
        result = _preflight("--simulate", str(_fleet(tmp_path)), "--hosts", "n1", "--budget", "30")
    assert result.exit_code == 0, result.output
