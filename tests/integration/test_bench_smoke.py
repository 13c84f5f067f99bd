"""Benchmarks at their --smoke size, so none can rot: each must start, run and print its figures."""

import re
import subprocess
import sys
from pathlib import Path

from netns_hosts import requires_netns

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from headless import missing_browser  # noqa: E402


def test_the_detection_benchmark_runs_every_scenario_and_finds_every_planted_fault():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "detection.py"), "--smoke"], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    rows = [line.split() for line in lines[1:] if "healthy" not in line and not line.startswith("targets")]
    scenarios = {" ".join(row[:2]) if row[1] in ("sku", "peers", "baseline") else row[0] for row in rows}
    assert {"mix", "share25", "share40", "share50", "shift sku", "shift baseline", "job1 sku", "job2 baseline",
            "job3 peers", "job4 peers"} <= scenarios
    for row in rows:  # ... kind precision recall faults shift exit hdrain hwatch seconds
        if row[0] == "history":  # a watch is an early word: flat parts are watched at about 1 % each
            assert row[-7] == "1.000", row  # its recall (history's rows have no hwatch)
            continue
        kind, precision, recall, faults, shift, exit_ok, drains, _ = row[-9:-1]
        # a 20 % slowdown is always found, and only it (at CV 3 % a P2P dip may stay a warning)
        assert (precision, recall) == ("1.000", "1.000") or (row[0] == "cv3" and recall in ("1.000", "-")), row
        assert shift in ("-", "1/1") and exit_ok in ("-", "1/1") and drains == "0", row
    (flat,) = [re.search(r"watched (\d+)/(\d+) = .*failed (\d+)/", line) for line in lines if "history healthy" in line]
    assert flat is not None and int(flat[3]) == 0 and int(flat[1]) <= 0.05 * int(flat[2]), flat  # no flat part failed
    assert any("healthy hosts flagged 0/16" in " ".join(line.split()) for line in lines)


def test_the_link_schedule_benchmark_runs_and_names_the_planted_faults():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "link_schedule.py"), "--smoke"], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "screen" in done.stdout and "full" in done.stdout


def test_the_fabric_benchmark_names_each_planted_switch_fault_and_fails_a_slow_jobs_network():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "fabric.py"), "--smoke"], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines() if re.match(r"[23]t ", line)]
    assert {row[4] for row in rows} == {"uplink", "two", "spine", "nic", "healthy"}
    for row in rows:  # fabric nodes rails spines scenario cv slow found... fabF nodeF nic scr fab cnf s
        if row[4] == "healthy":
            assert row[8] == "0/2" and row[10] == "0/2", row  # no fabric fail, no warn
        else:
            assert row[8] == "2/2" and row[11:13] == ["0", "0"], row  # exact, nothing else blamed
    jobs = [line for line in done.stdout.splitlines() if line.strip().endswith("%") and "nodes: exit" in line]
    assert jobs and all("exit 1, network fail 1, drained 0, excluded 0" in line for line in jobs)


def test_the_fanout_benchmark_runs_against_pdsh_on_real_sshd_hosts():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "fanout.py"), "--smoke"], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "end-to-end sweep" in done.stdout and "4/4 ok" in done.stdout


def test_the_hung_host_fanout_benchmark_times_every_tarpit_host_out_and_prints_its_figure():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "fanout_hung.py"), "--smoke"], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"sweep wall time: [\d.]+ s \(target <= 1.5 x 6.0 s = 9.0 s\)", done.stdout), done.stdout
    assert "statuses: timeout 48 " in done.stdout and "stderr with -q: 0 lines, 0 tracebacks" in done.stdout


def test_the_analysis_scale_and_gemm_probe_benchmarks_run_at_their_smoke_size():
    for script, *options, expected in (("analysis_scale.py", ("of the 20 slow GPUs named",
                                                              "whole sweep of 20 simulated nodes")),
                                       ("gemm_probe.py", ("TFLOP/s",)),
                                       ("gemm_probe.py", "--sku-table", ("gemm sku table",))):
        done = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--smoke", *options], capture_output=True,
                              text=True, timeout=300, check=False)
        assert done.returncode == 0, (script, done.stderr[-2000:])
        assert all(words in done.stdout for words in expected), (script, done.stdout[-1000:])


def test_the_html_report_benchmark_sizes_and_loads_the_report_of_a_simulated_sweep():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "html_report.py"), "--smoke"], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    size = re.search(r"html report of 50 nodes \((\d+) findings\): ([\d.]+) MB", done.stdout)
    assert size is not None, done.stdout[-1000:]
    assert int(size.group(1)) >= 5 and 0.05 < float(size.group(2)) < 1.0
    load = re.search(r"load in headless Chromium: (?:([\d.]+) s|skipped \((.+)\))", done.stdout)
    assert load is not None, done.stdout[-1000:]
    missing = missing_browser()
    if missing is None:  # a browser here: the report was loaded, and timed
        assert load.group(1) is not None and 0 < float(load.group(1)) < 10, done.stdout[-1000:]
    else:  # none: the benchmark says so, with the same reason
        assert load.group(2) == missing, done.stdout[-1000:]


@requires_netns
def test_the_netns_link_benchmark_times_screen_and_full_and_both_name_the_planted_faults():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "links_netns.py"), "--smoke"], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {line.split()[0]: line for line in done.stdout.splitlines()
            if line.split()[:1] in (["screen"], ["full"]) and " / " not in line}
    assert set(rows) == {"screen", "full"}, done.stdout
    for row in rows.values():
        assert row.endswith("slow_link node01–node02, slow_nic node03"), done.stdout
    assert "full / screen link phase" in done.stdout


def test_the_hostile_output_benchmark_measures_the_controllers_memory_and_the_hung_sftp_timeout():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "hostile_output.py"), "--smoke"], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    names = ("clean", "endless line", "endless records")
    rows = {name: line[len(name):].split() for line in done.stdout.splitlines() for name in names
            if line.startswith(name + " ")}  # exit, wall s, peak RSS MiB, above clean MiB
    assert set(rows) == set(names), done.stdout
    assert rows["endless line"][0] == "3" and rows["endless records"][0] == "3"  # the hostile host is unchecked
    assert all(float(row[3]) <= 200 for row in rows.values()), done.stdout  # bounded, whatever the node prints
    assert "above the clean sweep (target <= 200 MiB)" in done.stdout
    assert "hung SFTP on node02: timeout after" in done.stdout


def test_the_house_snapshot_of_one_tree_is_byte_identical_twice():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "house_snapshot.py"), "--smoke"], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.startswith("identical: "), done.stdout[-2000:]


def test_the_import_graph_figures_are_printed_with_no_circle():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "import_graph.py"), "--smoke"], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "modules:" in done.stdout and "rooms:" in done.stdout and "longest chain: gpudiag." in done.stdout


def test_the_host_scale_benchmark_folds_both_kinds_of_labels_and_projects_a_sweeps_memory():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "host_scale.py"), "--smoke"], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.strip().startswith(("node names", "addresses"))]
    assert len(rows) == 2 and all("same text" in row for row in rows), done.stdout
    assert re.search(r"a host costs [\d.]+ KiB; projected at 100000 hosts: \d+ MiB", done.stdout), done.stdout
