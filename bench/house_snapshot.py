"""House snapshot: the proof that a refactor changed nothing a user sees.

It runs gpudiag as a user does, each command a subprocess of this interpreter in a fixed
environment (COLUMNS=120, TERM=dumb, NO_COLOR=1, LC_ALL=C.UTF-8, TZ=UTC, PYTHONHASHSEED=0; HOME and
XDG folders in a temporary folder, so no user store is touched), and keeps each command's stdout,
stderr, exit status and written files: ``demo``; on an 8-node simulated fleet with planted faults a
``preflight``, a sweep with ``--links full``, one with ``--pause``, and one judged against the
baseline built from them, each with ``--json``, ``--prom-file`` and ``--exclude-file`` into one
store; ``report`` in every format, ``history``, ``baseline``, ``store prune --dry-run`` on that
store and its schema; the ``--help`` of every command and subcommand. Times, durations, sweep ids,
temporary paths and progress counts are masked, so two runs of one tree are byte-identical.

gpudiag comes from the tree asked for, copied first (tracked and untracked files) so edits made
meanwhile do not leak in: PYTHONPATH first, the editable install's finder removed, the tree's own
``[tool.setuptools.package-dir]`` (probes, cuda_kernels, report templates) mapped, and a first
command that fails loudly unless every gpudiag package was imported from that tree.

Usage: python bench/house_snapshot.py --save DIR [--tree PATH]      snapshot PATH (default: here)
       python bench/house_snapshot.py --against COMMIT [--tree PATH]
           COMMIT (a detached worktree) vs PATH: a diff of each differing file, then
           "identical: N files" (exit 0) or "differs: K of N files" (exit 1); about 2 minutes
       python bench/house_snapshot.py --smoke                       this tree twice, tiny, compared
"""

from __future__ import annotations

import argparse
import difflib
import io
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOSTNAME = socket.gethostname()
# Run in each subprocess: gpudiag from the tree in argv[1], never from the editable install.
BOOT = r"""
import importlib.machinery, json, runpy, sys, tomllib
from pathlib import Path
tree = Path(sys.argv.pop(1)).resolve()
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
sys.path_hooks[:] = [h for h in sys.path_hooks if not getattr(h, "__module__", "").startswith("__editable__")]
sys.path_importer_cache.clear()
project = tree / "pyproject.toml"
setup = tomllib.loads(project.read_text()).get("tool", {}).get("setuptools", {}) if project.is_file() else {}
dirs = {name: tree / where for name, where in setup.get("package-dir", {}).items() if name}
class TreeFinder:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in dirs:
            return None
        init = dirs[name] / "__init__.py"
        if init.is_file():
            return importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(dirs[name])])
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(dirs[name])]
        return spec
sys.meta_path.insert(0, TreeFinder)
import importlib.util, gpudiag
where = {name: list(importlib.util.find_spec(name).submodule_search_locations or []) for name in ["gpudiag", *dirs]}
stray = {name: paths for name, paths in where.items() if not all(Path(p).resolve().is_relative_to(tree) for p in paths)}
if stray or not Path(gpudiag.__file__).resolve().is_relative_to(tree):
    sys.exit(f"house_snapshot: gpudiag is not imported from {tree}: {gpudiag.__file__}, {stray}")
if sys.argv[1:] == ["--where"]:
    print(json.dumps({"gpudiag": gpudiag.__file__, **where}))
    sys.exit(0)
runpy.run_module("gpudiag", run_name="__main__", alter_sys=True)
"""
SWEEP_ID = re.compile(r"\b\d{8}T\d{6}Z-[0-9a-f]{4}\b")  # the start time and 4 random hex digits
PROGRESS = re.compile(r"^gpudiag: (\d+)/(\d+) hosts done · (\d+) failed · \d+ running · [\d.]+ s\n", re.M)
# Times are masked digit by digit, so rich tables keep their widths and wrap where they did.
TIMES = re.compile(r"\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?)?|\b\d{8}T\d{6}Z")
VOLATILE = [  # (pattern, replacement), applied after sweep ids, paths and times
    (re.compile(r'("(?:duration|elapsed|wall|took)_s": )-?[\d.]+(?:e-?\d+)?'), r'\1"<s>"'),  # JSON stays JSON
    (re.compile(r"\b(in|took) [\d.]+ s\b"), r"\1 <s> s"),
    (re.compile(r"^(\w*timestamp_seconds(?:\{[^}]*\})?) \S+$", re.M), r"\1 <epoch>"),
]
FAULTS = [{"kind": "slow_gpu", "host": "node003", "gpu": 2, "factor": 0.8},
          {"kind": "slow_nic", "host": "node005", "factor": 0.6},
          {"kind": "slow_link", "a": "node001", "b": "node006", "factor": 0.5},
          {"kind": "throttled", "host": "node007", "gpu": 0, "reason": "hw_thermal"},
          {"kind": "unreachable", "host": "node008"}]
SMOKE_FAULTS = [{"kind": "slow_gpu", "host": "node002", "gpu": 1, "factor": 0.8}]
PAUSED_JOB = {"kind": "paused_job", "host": "node002", "used_mib": 60000}
REPORT_FORMATS = ("text", "md", "json", "html")
STORE = "store.db"  # in the work folder, shared by every step but the demo


@dataclass(frozen=True)
class Step:
    """One command: ``name`` names its files in the snapshot; ``files`` maps a suffix there to
    a path it writes, relative to the work folder; ``sweep_json`` is the written sweep document."""

    name: str
    argv: tuple[str, ...]
    files: tuple[tuple[str, str], ...] = ()
    sweep_json: str | None = None


def sweep(name: str, command: str, fleet: str, *options: str) -> Step:
    """A simulated ``sweep`` or ``preflight`` into the shared store, writing JSON, Prometheus, exclusions."""
    files = (("json", f"{name}.json"), ("prom", f"{name}.prom"), ("exclude", f"{name}.exclude"))
    args = (command, "--simulate", fleet, *options, "--store", STORE, "--json", f"{name}.json",
            "--prom-file", f"{name}.prom", "--exclude-file", f"{name}.exclude")
    return Step(name, args, files, f"{name}.json")


def run_steps(smoke: bool) -> list[Step]:
    """The commands before the --help walk, in order: the sweeps fill the store, a baseline is built
    from them and judges one more sweep, and the rest read that store."""
    demo = Step("demo", ("demo", "--output", "demo"), (("json", "demo/sweep.json"), ("html", "demo/report.html"),
                                                       ("exclude", "demo/exclude.txt")), "demo/sweep.json")
    links_full = sweep("sweep-links-full", "sweep", "fleet.json", "--links", "full")
    if smoke:  # the demo (14 s a run, tested on its own in tests/cli/test_fleet_cli.py) only in the full snapshot
        return [Step("version", ("--version",)), links_full, Step("report-text", ("report", "--store", STORE))]
    return [Step("version", ("--version",)), demo,
            sweep("preflight", "preflight", "fleet.json", "--hosts", "node[001-007]"), links_full,
            sweep("sweep-pause", "sweep", "fleet-pause.json", "--pause"),
            Step("baseline-build", ("baseline", "build", "--last", "3", "--store", STORE)),
            Step("baseline-show", ("baseline", "show", "--store", STORE)),
            Step("baseline-show-default", ("baseline", "show", "default", "--store", STORE)),
            Step("baseline-export", ("baseline", "export", "default", "baseline.json", "--store", STORE),
                 (("json", "baseline.json"),)),
            sweep("sweep-after-baseline", "sweep", "fleet.json"),
            Step("report-file", ("report", "sweep-links-full.json")),
            *(Step(f"report-{fmt}", ("report", "--store", STORE, "--format", fmt, "-o", f"report.{fmt}"),
                   (("file", f"report.{fmt}"),)) for fmt in REPORT_FORMATS),
            Step("report-latest", ("report", "--store", STORE)),
            Step("history", ("history", "--store", STORE)),
            Step("history-node003", ("history", "node003", "--store", STORE)),
            Step("history-node003-json", ("history", "node003", "--json", "-", "--store", STORE)),
            Step("store-prune-dry-run", ("store", "prune", "--keep", "1", "--dry-run", "--store", STORE))]


def store_schema(path: Path) -> str:
    """The store's tables and indexes and their row counts: the file users keep across versions."""
    if not path.is_file():
        return "<no store>\n"
    with closing(sqlite3.connect(path)) as db:
        rows = db.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").fetchall()
        counts = [f"{name}: {db.execute(f'SELECT COUNT(*) FROM [{name}]').fetchone()[0]} rows"
                  for kind, name, _ in rows if kind == "table"]
    return "\n".join([*(f"{sql};" for _, _, sql in rows if sql), *counts]) + "\n"


class Snapshot:
    """One tree's snapshot: runs the steps in ``work`` and writes normalised files into ``out``."""

    def __init__(self, tree: Path, work: Path, out: Path) -> None:
        self.tree, self.work, self.out = tree.resolve(), work, out
        self.sweep_ids: dict[str, str] = {}
        home = work / "home"
        self.env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(home),
                    "XDG_DATA_HOME": str(home / "data"), "XDG_CONFIG_HOME": str(home / "config"),
                    "XDG_CACHE_HOME": str(home / "cache"), "XDG_STATE_HOME": str(home / "state"),
                    "TMPDIR": str(work / "tmp"), "PYTHONPATH": str(self.tree), "PYTHONHASHSEED": "0",
                    "COLUMNS": "120", "LINES": "50", "TERM": "dumb", "NO_COLOR": "1", "LC_ALL": "C.UTF-8",
                    "LANG": "C.UTF-8", "TZ": "UTC", "PYTHONIOENCODING": "utf-8"}
        for folder in (home, work / "tmp", out / "help"):
            folder.mkdir(parents=True, exist_ok=True)

    def gpudiag(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """``python -m gpudiag ARGV`` from the tree, in the work folder (10 minutes at most)."""
        return subprocess.run([sys.executable, "-c", BOOT, str(self.tree), *argv], cwd=self.work, env=self.env,
                              capture_output=True, encoding="utf-8", errors="replace", timeout=600, check=False)

    def take(self, smoke: bool) -> int:
        """Run every step and the --help walk; return the number of files written."""
        where = self.gpudiag(["--where"])
        if where.returncode != 0:
            sys.exit(f"house_snapshot: gpudiag does not run from {self.tree}:\n{where.stderr.strip()}")
        faults = SMOKE_FAULTS if smoke else FAULTS
        for name, planted in (("fleet.json", faults), ("fleet-pause.json", [*faults, PAUSED_JOB])):
            fleet = {"nodes": 4 if smoke else 8, "seed": 3, "faults": planted}
            (self.work / name).write_text(json.dumps(fleet), encoding="utf-8")
        for step in run_steps(smoke):
            self.record(step)
        self.write("store-schema.txt", store_schema(self.work / STORE))
        self.walk_help(smoke, "gpudiag")
        return sum(1 for path in self.out.rglob("*") if path.is_file())

    def record(self, step: Step) -> None:
        done = self.gpudiag(step.argv)
        if step.sweep_json and (self.work / step.sweep_json).is_file():
            sweep_id = str(json.loads((self.work / step.sweep_json).read_text(encoding="utf-8")).get("sweep_id"))
            self.sweep_ids.setdefault(sweep_id, f"<{step.name}>".ljust(len(sweep_id), "_"))
        self.write(f"{step.name}.cmd", "gpudiag " + " ".join(step.argv) + "\n")
        self.write(f"{step.name}.out", done.stdout)
        self.write(f"{step.name}.err", done.stderr)
        self.write(f"{step.name}.rc", f"{done.returncode}\n")
        for suffix, path in step.files:
            written = self.work / path
            self.write(f"{step.name}.{suffix}",
                       written.read_text(encoding="utf-8") if written.is_file() else "<not written>\n")

    def walk_help(self, top_only: bool, name: str, *path: str) -> None:
        """Every command's --help, recursively through each 'Commands:' section (or the top one's)."""
        done = self.gpudiag([*path, "--help"])
        self.write(f"help/{name}.txt", done.stdout + done.stderr + f"exit {done.returncode}\n")
        if top_only:
            return
        section = done.stdout.partition("\nCommands:\n")[2]
        for command in re.findall(r"^  (\S+)", section, re.M):
            self.walk_help(top_only, "-".join((*path, command)), *path, command)

    def write(self, relative: str, text: str) -> None:
        (self.out / relative).write_text(self.normalise(text), encoding="utf-8")

    def normalise(self, text: str) -> str:
        """``text`` with its volatile parts replaced by placeholders (sweep ids and times keep their width)."""
        for sweep_id, label in self.sweep_ids.items():
            text = text.replace(sweep_id, label)
        text = SWEEP_ID.sub(lambda m: "<sweep-?>".ljust(len(m[0]), "_"), text)
        for path, label in ((self.work.resolve(), "<work>"), (self.work, "<work>"), (self.tree, "<tree>")):
            text = text.replace(str(path), label)
        if len(HOSTNAME) >= 4:  # a short one ("vm") is part of ordinary words
            text = re.sub(rf"\b{re.escape(HOSTNAME)}\b", "<hostname>", text)
        text = TIMES.sub(lambda m: re.sub(r"\d", "#", m[0]), text)
        text = PROGRESS.sub(lambda m: f"gpudiag: {m[1]}/{m[2]} hosts done · {m[3]} failed · <progress>\n"
                            if m[1] == m[2] else "", text)  # which counts are shown before the end is timing
        for pattern, replacement in VOLATILE:
            text = pattern.sub(replacement, text)
        return text


def take_snapshot(tree: Path, out: Path, smoke: bool) -> int:
    """Snapshot ``tree`` into ``out`` (emptied first); return the number of files."""
    shutil.rmtree(out, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="house-snapshot-") as work:
        return Snapshot(tree, Path(work), out).take(smoke)


def freeze(tree: Path, copy: Path) -> Path:
    """A copy of a git checkout's files as they are now (tracked and untracked, not ignored), so a
    tree that is being edited meanwhile is snapshotted as it was at one moment; ``tree`` itself
    where it is no git checkout."""
    listed = subprocess.run(["git", "-C", str(tree), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=False)
    if listed.returncode != 0:
        return tree
    for name in filter(None, listed.stdout.decode().split("\0")):
        if (tree / name).is_symlink():  # a link (gpudiag/bundle/probes -> probes/) stays a link
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            (copy / name).symlink_to(os.readlink(tree / name))
        elif (tree / name).is_file():  # a tracked file deleted in the tree is not copied
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(tree / name, copy / name)
    return copy


def readable(path: Path) -> list[str]:
    """The file's lines for a diff: a JSON document indented, long HTML lines cut at tags."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    if path.suffix == ".json" or text.startswith("{"):
        try:
            text = json.dumps(json.loads(text), indent=1, ensure_ascii=False) + "\n"
        except json.JSONDecodeError:
            pass
    return text.replace("><", ">\n<").splitlines(keepends=True)


def compare(before: Path, after: Path, max_lines: int = 400) -> int:
    """Print a unified diff of every differing file and the summary; return the exit status."""
    names = sorted({p.relative_to(root).as_posix() for root in (before, after) for p in root.rglob("*") if p.is_file()})
    differing = [name for name in names if not (before / name).is_file() or not (after / name).is_file()
                 or (before / name).read_bytes() != (after / name).read_bytes()]
    for name in differing:
        diff = list(difflib.unified_diff(readable(before / name), readable(after / name), f"before/{name}",
                                         f"after/{name}"))
        sys.stdout.writelines(diff[:max_lines] or [f"--- {name}: differs in layout only (whitespace)\n"])
        if len(diff) > max_lines:
            print(f"... {len(diff) - max_lines} more diff lines in {name}")
    print(f"differs: {len(differing)} of {len(names)} files" if differing else f"identical: {len(names)} files")
    return 1 if differing else 0


def against(commit: str, tree: Path, smoke: bool) -> int:
    """Snapshot ``commit`` (a detached worktree, removed afterwards) and ``tree``, and compare them."""
    with tempfile.TemporaryDirectory(prefix="house-against-") as scratch_dir:
        scratch = Path(scratch_dir)
        after = freeze(tree, scratch / "after-tree")
        if subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet",
                           str(scratch / "before-tree"), commit], check=False).returncode != 0:
            sys.exit(f"house_snapshot: no worktree of {commit}")
        try:
            take_snapshot(scratch / "before-tree", scratch / "before", smoke)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(scratch / "before-tree")],
                           check=False)
        take_snapshot(after, scratch / "after", smoke)
        return compare(scratch / "before", scratch / "after")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--save", type=Path, metavar="DIR", help="write the snapshot of --tree here")
    action.add_argument("--against", metavar="COMMIT", help="compare COMMIT with --tree")
    parser.add_argument("--tree", type=Path, default=ROOT, help="source tree to snapshot (default: this checkout)")
    parser.add_argument("--smoke", action="store_true", help="tiny size; alone: --tree twice, compared")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))  # the worktree is still removed
    if isinstance(sys.stdout, io.TextIOWrapper):  # the outputs are UTF-8 whatever the locale says
        sys.stdout.reconfigure(encoding="utf-8")
    if args.against:
        sys.exit(against(args.against, args.tree, args.smoke))
    if not (args.save or args.smoke):
        parser.error("one of --save, --against or --smoke is needed")
    with tempfile.TemporaryDirectory(prefix="house-frozen-") as scratch:
        tree = freeze(args.tree, Path(scratch) / "tree")
        if args.save:
            print(f"{take_snapshot(tree, args.save, args.smoke)} files in {args.save}")
            return
        for run in ("first", "second"):
            take_snapshot(tree, Path(scratch) / run, smoke=True)
        sys.exit(compare(Path(scratch) / "first", Path(scratch) / "second"))


if __name__ == "__main__":
    main()
