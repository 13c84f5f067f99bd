"""``gpudiag topology FILE...`` on the captures of tests/data/topology: what it prints, the JSON it
writes (which reads back), ``--rails``, and bad input: exit 2 with one line on stderr naming the
file, the line and the fix, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from gpudiag.cli.main import main

DATA = Path(__file__).resolve().parents[1] / "data" / "topology"


def _run(*args: str) -> Result:
    return CliRunner().invoke(main, ["topology", *args])


def test_a_capture_is_shown_per_rail_with_tiers_leaves_and_links():
    result = _run(str(DATA / "ib-two-rails-ndr.txt"))
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"{DATA / 'ib-two-rails-ndr.txt'}: 2 planes (rails 0, 1), 8 switches, 4 nodes\n")
    assert "\nrail 1: 4 switches, 4 links between switches, 4 nodes\n" in result.output
    assert "nodes gpu-a[03-04] (2 × 400 Gb/s); oversubscription 1.33:1 (800 / 600 Gb/s up)" in result.output
    assert "MF0;ib-r0-leaf02:MQM9700/U1 – MF0;ib-r0-spine02:MQM9700/U1: 1 cable × 200 Gb/s; ports 35–3" in result.output


def test_json_to_stdout_is_a_topology_file_that_reads_back(tmp_path: Path):
    result = _run(str(DATA / "pod.topology.json"), "--json", "-")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["schema"] == "gpudiag.topology/1"
    assert [plane["rail"] for plane in document["planes"]] == [0, 1, 2, 3, 4]
    saved = tmp_path / "saved.json"
    saved.write_text(result.output)
    again = _run(str(saved), "--json", "-")
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["planes"] == document["planes"]


def test_json_to_a_file_prints_nothing(tmp_path: Path):
    out = tmp_path / "topology.json"
    result = _run(str(DATA / "roce.topology.json"), "--json", str(out))
    assert (result.exit_code, result.stdout) == (0, "")
    assert json.loads(out.read_text())["planes"][0]["leaves"][0]["nodes"] == "gpu-c[01-02]"


def test_a_rails_map_puts_each_hca_on_its_rail(tmp_path: Path):
    rails = tmp_path / "rails.json"
    rails.write_text('{"mlx5_0": 3, "mlx5_1": 2, "mlx5_3": 2}')
    result = _run(str(DATA / "ib-two-rails-ndr.txt"), "--rails", str(rails), "--json", "-")
    assert result.exit_code == 0, result.output
    planes = json.loads(result.output)["planes"]
    assert [plane["rail"] for plane in planes] == [2, 3]
    assert {node["nic"] for node in planes[0]["nodes"]} == {"mlx5_1", "mlx5_3"}


def test_the_shipped_rails_map_gives_the_natural_order_of_the_capture():
    plain = _run(str(DATA / "ib-two-rails-ndr.txt"), "--json", "-")
    mapped = _run(str(DATA / "ib-two-rails-ndr.txt"), "--rails", str(DATA / "rails.json"), "--json", "-")
    assert (plain.exit_code, mapped.exit_code) == (0, 0)
    assert json.loads(mapped.output)["planes"] == json.loads(plain.output)["planes"]


def test_several_files_merge_by_rail():
    result = _run(str(DATA / "topology.conf"), str(DATA / "ib-two-rails-ndr.txt"))
    assert result.exit_code == 0, result.output
    assert "3 planes (rails 0, 1; one for every rail)" in result.output


@pytest.mark.parametrize(("name", "text", "line", "problem"), [
    ("topology.conf", "SwitchName=leaf1 Nodes=n[1-2]\nSwitchName=top Switches=leaf[1-2]\n", 2,
     "switch 'leaf2' is not defined by any SwitchName line; add one or remove it from Switches="),
    ("fabric.txt", 'vendid=0x2c9\nSwitch\t36 "S-0c42a10300e84a10"\t\t# "leaf1" enhanced port 0 lid 3 lmc 0\n'
                   '[1]\t"H-0c42a10300e84b20"[1](0c42a10300e84b20) \t\t# "n1 mlx5_0" lid 4 4xHDR\n', 3,
     "port 1 of 'leaf1' leads to H-0c42a10300e84b20 ('n1 mlx5_0'), which has no Ca block: a node missing"),
    ("topo.json", '{"schema": "gpudiag.topology/1",\n "planes": [{"rail": 0, "switches": [{"name": "l1"}],\n'
                  '  "nodes": [{"host": "n1", "switch": "l2"}]}]}', 3,
     "planes[0].nodes[0].switch: 'l2' is no switch of rail 0"),
])
def test_bad_input_exits_2_with_one_line_naming_the_file_and_line(tmp_path: Path, name: str, text: str, line: int,
                                                                    problem: str):
    path = tmp_path / name
    path.write_text(text)
    result = _run(str(path))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"gpudiag: error: {path}:{line}: {problem}")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_a_file_of_no_known_format_and_a_missing_file_exit_2(tmp_path: Path):
    junk = tmp_path / "notes.txt"
    junk.write_text("gpu01 is on leaf 3\n")
    result = _run(str(junk))
    assert result.exit_code == 2
    assert "no topology format gpudiag reads; give an ibnetdiscover capture, a Slurm topology.conf" in result.stderr
    result = _run(str(tmp_path / "missing.txt"))
    assert (result.exit_code, result.stderr.count("\n")) == (2, 1)
    assert "missing.txt: cannot read it" in result.stderr


def test_a_bad_rails_map_and_a_bad_json_target_exit_2_before_reading(tmp_path: Path):
    rails = tmp_path / "rails.json"
    rails.write_text('{"mlx5_0": -1}')
    result = _run(str(DATA / "ib-two-rails-ndr.txt"), "--rails", str(rails))
    assert result.exit_code == 2
    assert f"{rails}:1: mlx5_0: -1 is no rail number" in result.stderr
    result = _run(str(DATA / "ib-two-rails-ndr.txt"), "--json", str(tmp_path / "no" / "such" / "t.json"))
    assert result.exit_code == 2 and "does not exist" in result.stderr
    assert _run().exit_code == 2  # FILE is required: click's own usage error
