"""The package layout's rules, held on the import graph read with ``ast`` (tests/importgraph.py):
the command line on top and imported by nothing, the simulator beside production paths rather
than in them, the analysis blind to how its findings are shown, and the node bundle apart."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from importgraph import ImportGraph, read_graph, rooms, within  # noqa: E402


@pytest.fixture(scope="module")
def graph() -> ImportGraph:
    return read_graph()


def _outside(found: dict[str, set[str]], *allowed: str) -> dict[str, set[str]]:
    return {module: targets for module, targets in found.items()
            if not any(within(module, prefix) for prefix in allowed)}


def test_the_graph_reader_sees_the_imports_it_is_asked_about(graph: ImportGraph):
    # the rules below are only as good as the reader: it must see relative, absolute and
    # function-level imports, and outside packages
    assert "gpudiag.run.sweep" in graph.importers_of("gpudiag.analysis")
    assert "click" in graph.external["gpudiag.cli.main"]
    assert _outside(graph.importers_of("gpudiag.cli"), "gpudiag.cli") == {"gpudiag.__main__": {"gpudiag.cli.main"}}


def test_only_the_command_line_imports_click(graph: ImportGraph):
    assert [module for module, names in graph.external.items()
            if "click" in names and not within(module, "gpudiag.cli")] == []


def test_nothing_imports_the_command_line(graph: ImportGraph):
    assert _outside(graph.importers_of("gpudiag.cli"), "gpudiag.cli", "gpudiag.__main__") == {}


def test_only_the_command_line_and_the_simulator_itself_import_the_simulator(graph: ImportGraph):
    assert _outside(graph.importers_of("gpudiag.sim"), "gpudiag.cli", "gpudiag.sim") == {}


def test_the_run_and_the_analysis_never_import_the_report(graph: ImportGraph):
    assert {module: targets for module, targets in graph.importers_of("gpudiag.report").items()
            if within(module, "gpudiag.run") or within(module, "gpudiag.analysis")} == {}


def test_the_controller_and_the_node_bundle_never_import_each_other(graph: ImportGraph):
    assert _outside(graph.importers_of("probes"), "probes") == {}
    assert {module: targets for module, targets in graph.importers_of("gpudiag").items()
            if within(module, "probes")} == {}


def test_no_module_sits_flat_in_gpudiag_but_the_shared_vocabulary():
    flat = sorted(path.name for path in (Path(__file__).resolve().parents[2] / "gpudiag").glob("*.py"))
    assert flat == ["__init__.py", "__main__.py", "errors.py", "exitcodes.py", "findings.py",
                    "records.py", "words.py"]


def test_no_modules_import_each_other_in_a_circle(graph: ImportGraph):
    assert graph.cycles() == []


def test_no_rooms_import_each_other_in_a_circle(graph: ImportGraph):
    # A room is a package taken whole (or a flat module): records -> schema -> records, or
    # analysis -> records -> schema -> analysis, would make the layers unreadable even where
    # the modules themselves form no circle.
    assert rooms(graph).cycles() == []


def test_every_document_the_code_cites_is_in_the_repository():
    """A reference a reader meets resolves inside the repository: docs/*.md the code names exist,
    and no file cites the notes the project was designed from (they are not in it)."""
    root = Path(__file__).resolve().parents[2]
    outside = ("DESIGN" + ".md", "STYLE" + ".md")
    cited: set[str] = set()
    for folder in ("gpudiag", "probes", "bench", "tests", "scripts", "docs"):
        for path in (root / folder).rglob("*"):
            if path.is_file() and path.suffix in (".py", ".md", ".sh", "") and not path.is_symlink():
                text = path.read_text(errors="replace")
                assert not any(name in text for name in outside), path
                cited |= set(re.findall(r"\bdocs/[\w-]+\.md\b", text))
    missing = sorted(name for name in cited if not (root / name).is_file())
    assert cited and not missing, missing
