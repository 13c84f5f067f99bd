"""Reading the kernel log and finding the NVIDIA driver's Xid lines in it.

The driver (NVRM) reports each GPU fault as one kernel-log line whose shape varies with the
driver version and with the tool that shows the log. Shapes seen in real logs (tests/data/kernel-log/
holds the captures, with their sources):

- ``NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s ...`` (current
  drivers: ``PCI:`` and the bus id without its function);
- ``NVRM: Xid (0000:03:00): 14, Channel 00000001`` (older drivers: no ``PCI:``);
- ``NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: ...`` (MIG: the GPU instance after
  the bus id; the format NVIDIA's open kernel modules document in kern_gpu_ga100.c);
- before ``NVRM:``, whatever the log tool adds: ``[Fri Aug 30 11:43:09 2024]`` (``dmesg --ctime``),
  ``[240314.528856]`` (seconds since boot), ``2024-08-30T11:43:09+0000 host kernel:``
  (``journalctl -o short-iso``), ``Dec  2 10:43:35 worker4 kernel:`` (syslog).

Where the log comes from, in order: the journal's kernel messages of the last ``SINCE`` (every boot
the journal keeps: an Xid 79 is usually followed by a reboot, so it sits in the previous boot),
else ``dmesg --time-format iso``, else plain ``dmesg`` (the ring buffer: this boot only, and older
lines may be overwritten). A log that cannot be read (no journal, ``kernel.dmesg_restrict``) raises
:class:`KernelLogUnreadable` naming every source tried and why it failed; it is never read as
"no Xid".
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

# How far back the journal is read (journalctl's relative-time syntax).
SINCE = "-7d"
# journalctl's kernel messages of every kept boot (``-k`` alone would mean this boot only). Never
# ``--quiet``: it also hides the warning that the system journal could not be read, and a user
# without access would then see an empty log, which reads as "no Xid".
JOURNAL_ARGV = ("journalctl", "_TRANSPORT=kernel", "--since", SINCE, "-o", "short-iso", "--no-pager")
DMESG_ISO_ARGV = ("dmesg", "--time-format", "iso")
DMESG_ARGV = ("dmesg",)
# journalctl says these (on stderr, with exit status 0) when it could not read the system journal.
_JOURNAL_REFUSALS = ("insufficient permissions", "not seeing messages from other users and the system",
                     "No journal files were found", "No journal files were opened")
# dmesg's complaints about an option its version lacks (busybox, old util-linux).
_UNKNOWN_OPTION = ("unrecognized option", "invalid option", "unknown option")
UNKNOWN_OPTION_NOTE = "(this dmesg lacks the option)"
_DENIED = ("Operation not permitted", "Permission denied")
DMESG_RESTRICT_HINT = ("the kernel restricts dmesg to privileged users (kernel.dmesg_restrict=1): "
                       "run as root or give the user CAP_SYSLOG")

XID_MARKER = "NVRM: Xid"
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?"
    r"(?:\s+GPU-I:\s*(?P<instance>[0-9A-Fa-f]+))?[^)]*\):\s*(?P<code>\d+)\s*,?\s*(?P<message>.*)$")
_ISO_TIME = re.compile(r"^(?P<time>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:[+-]\d{2}:?\d{2}|Z)?)\s")
_BRACKET_TIME = re.compile(r"\[\s*(?P<time>[^\]]+?)\s*\]\s*$")
_SYSLOG_TIME = re.compile(r"^(?P<time>[A-Z][a-z]{2}\s+\d{1,2}\s+\d{2}:\d{2}:\d{2})\s")


class KernelLogUnreadable(Exception):
    """No source of the kernel log could be read; the message names each source and why."""


@dataclass(frozen=True)
class CommandOutput:
    """How one log command ended: its exit status, stdout and stderr (text)."""

    exit_status: int
    stdout: str
    stderr: str


# Runs argv under a time limit (seconds). Raises FileNotFoundError when the program is missing and
# subprocess.TimeoutExpired when it runs too long.
CommandRunner = Callable[[Sequence[str], float], CommandOutput]


def run_command(argv: Sequence[str], timeout_s: float) -> CommandOutput:
    """Run ``argv`` and return how it ended; raises FileNotFoundError, subprocess.TimeoutExpired."""
    done = subprocess.run(list(argv), capture_output=True, text=True, errors="replace", timeout=timeout_s,
                          check=False, stdin=subprocess.DEVNULL)
    return CommandOutput(done.returncode, done.stdout, done.stderr)


@dataclass(frozen=True)
class KernelLog:
    """The kernel log as read: which ``source`` (``journalctl`` or ``dmesg``), the ``command`` run,
    what it covers (``scope``, in words) and its ``lines``."""

    source: str
    command: str
    scope: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class XidLine:
    """One Xid line: the GPU's PCI bus id as the driver printed it, lower-cased, without ``PCI:``
    (``0000:9b:00``), the MIG GPU instance where printed, the Xid ``code``, the driver's
    ``message`` after the code, ``when`` the log says it happened (its own words; None where the
    line carries no time) and the whole ``line``."""

    pci_bus_id: str
    code: int
    message: str
    when: str | None
    line: str
    gpu_instance: str | None = None


def read_kernel_log(timeout_s: float, run: CommandRunner = run_command) -> KernelLog:
    """The kernel log from the first source that can be read (see the module docstring).

    Raises KernelLogUnreadable naming every source tried and why it could not be read.
    """
    why: list[str] = []
    output = _attempt(JOURNAL_ARGV, timeout_s, run, why)
    if output is not None:
        refusal = next((line.strip() for line in output.stderr.splitlines()
                        if any(text in line for text in _JOURNAL_REFUSALS)), None)
        if refusal is None:
            return KernelLog("journalctl", " ".join(JOURNAL_ARGV), f"kernel messages of the last {SINCE[1:]}, "
                             "every boot the journal keeps", tuple(output.stdout.splitlines()))
        why.append(f"journalctl: {refusal}")
    for argv in (DMESG_ISO_ARGV, DMESG_ARGV):
        output = _attempt(argv, timeout_s, run, why)
        if output is not None:
            return KernelLog("dmesg", " ".join(argv), "the kernel ring buffer: this boot only, older lines may "
                             "have been overwritten", tuple(output.stdout.splitlines()))
        if not why[-1].endswith(UNKNOWN_OPTION_NOTE):
            break  # plain dmesg would fail the same way (no permission, not installed)
    raise KernelLogUnreadable("; ".join(why))


def _attempt(argv: Sequence[str], timeout_s: float, run: CommandRunner, why: list[str]) -> CommandOutput | None:
    """The command's output when it exited 0; else None, with the reason appended to ``why``."""
    name = argv[0]
    try:
        output = run(argv, timeout_s)
    except FileNotFoundError:
        why.append(f"{name}: not installed (not on PATH)")
        return None
    except subprocess.TimeoutExpired:
        why.append(f"{name}: no answer within {timeout_s:g} s")
        return None
    if output.exit_status == 0:
        return output
    said = _first_line(output.stderr) or f"exit status {output.exit_status}"
    if any(text in output.stderr.lower() for text in _UNKNOWN_OPTION):
        said = f"{said} {UNKNOWN_OPTION_NOTE}"
    elif name == "dmesg" and any(text in output.stderr for text in _DENIED):
        said = f"{said} ({DMESG_RESTRICT_HINT})"
    why.append(f"{' '.join(argv)}: {said}")
    return None


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else ""


def parse_xid_line(line: str) -> XidLine | None:
    """The Xid in one kernel-log line, or None when the line has none or is of a shape this
    parser does not know (see :func:`find_xids`, which keeps such lines)."""
    marker = line.find(XID_MARKER)
    if marker < 0:
        return None
    match = _XID.search(line, marker)
    if match is None:
        return None
    instance = match.group("instance")
    return XidLine(pci_bus_id=match.group("bus").lower(), code=int(match.group("code")),
                   message=match.group("message").strip(), when=_when(line[:marker]), line=line.rstrip(),
                   gpu_instance=instance.lower() if instance else None)


def _when(prefix: str) -> str | None:
    """The time the log tool put before ``NVRM:``, in its own words."""
    text = prefix.replace("kernel:", " ").rstrip()
    for pattern in (_ISO_TIME, _SYSLOG_TIME):
        match = pattern.match(text.lstrip() + " ")
        if match:
            return match.group("time")
    match = _BRACKET_TIME.search(text)
    return match.group("time") if match else None


@dataclass(frozen=True)
class XidScan:
    """The Xid lines of a log, and those lines naming an Xid that :func:`parse_xid_line` could not read."""

    xids: tuple[XidLine, ...]
    unparsed: tuple[str, ...]


def find_xids(lines: Iterable[str]) -> XidScan:
    """Every Xid line in ``lines``, in order; a line that names an Xid in a shape this parser does
    not know is kept in ``unparsed``, never dropped."""
    xids: list[XidLine] = []
    unparsed: list[str] = []
    for line in lines:
        if XID_MARKER not in line:
            continue
        parsed = parse_xid_line(line)
        if parsed is None:
            unparsed.append(line.rstrip())
        else:
            xids.append(parsed)
    return XidScan(tuple(xids), tuple(unparsed))
