"""Report text for a terminal (wrapped, never inside a word, a number with its unit or a pair of
hosts) and findings alike but for their host folded into one, as the reports print them."""

from __future__ import annotations

import re

import pytest

from gpudiag.report import render_report
from gpudiag.report.folding import fold_findings
from gpudiag.report.wrap import HANG, wrap_line, wrap_text

FINDING = ("  fail slow_nic 127.0.0.2 ↔ 127.0.0.3 · link.perftest 24.0 Gbit/s vs fleet 48.0 Gbit/s "
           "(−50.0 % below, z -9.8) · confirmed by re-test · action: drain — take node017 out of the scheduler and "
           "reseat its cable")


@pytest.mark.parametrize("width", [40, 60, 80, 100])
def test_a_long_finding_wraps_within_the_width_with_a_hanging_indent_and_loses_no_word(width: int):
    lines = wrap_line(FINDING, width)
    assert len(lines) > 1 and all(len(line) <= width for line in lines)
    assert lines[0].startswith("  fail ") and all(line.startswith(" " * (2 + HANG)) for line in lines[1:])
    assert " ".join(line.strip() for line in lines) == " ".join(FINDING.split())


@pytest.mark.parametrize("width", [30, 45, 60, 80])
def test_no_host_pair_number_or_unit_is_split_across_lines(width: int):
    text = "\n".join(line.strip() for line in wrap_line(FINDING, width))
    for whole in ("127.0.0.2 ↔ 127.0.0.3", "24.0 Gbit/s", "48.0 Gbit/s", "(−50.0 %", "node017", "link.perftest"):
        assert whole in text, (whole, text)


def test_a_word_longer_than_the_width_stands_alone_and_whole():
    host = "node-" + "x" * 70
    lines = wrap_line(f"  warn unchecked {host} · unreachable: name does not resolve", 40)
    assert host in [line.strip() for line in lines]


def test_lines_that_fit_and_line_breaks_stay_as_they_were():
    text = "sweep x · 2 hosts\n\n  short line   with  spaces\n"
    assert wrap_text(text, 80) == text


def _unchecked(host: str) -> dict:
    return {"kind": "unchecked", "severity": "warn", "host": host, "evidence": "interrupted: the sweep was interrupted",
            "action": "inspect", "action_detail": "run the sweep again", "basis": "host_status"}


def test_findings_that_differ_only_by_host_fold_into_one_and_others_stay_apart():
    slow = {"kind": "slow_gpu", "severity": "fail", "host": "node003", "gpu": 2, "value": 600.0,
            "evidence": "node003:2 is slow"}
    named = [{**_unchecked(f"node{i:03d}"), "evidence": f"node{i:03d}: name does not resolve"} for i in (70, 71)]
    findings = [slow, *(_unchecked(f"node{i:03d}") for i in range(4, 65)), *named,
                {**slow, "host": "node009", "value": 610.0, "evidence": "node009:2 is slow"}]
    folded = fold_findings(findings)
    assert [f["host"] for f in folded] == ["node003", "node[004-064]", "node[070-071]", "node009"]
    assert len(folded[1]["hosts"]) == 61 and folded[2]["evidence"] == "node[070-071]: name does not resolve"
    assert fold_findings([slow, {**slow, "gpu": 3}]) == [slow, {**slow, "gpu": 3}]  # another GPU: not alike


def _interrupted_document() -> dict:
    hosts = [{"host": f"node{i:03d}", "status": "interrupted", "error": "the sweep was interrupted"}
             for i in range(4, 65)]
    findings = [_unchecked(h["host"]) for h in hosts]
    findings.append({"kind": "throttled", "severity": "warn", "host": "node001", "gpu": 0, "evidence": "power cap"})
    return {"sweep_id": "s1", "hosts": [{"host": "node001", "status": "ok"}, *hosts], "findings": findings,
            "impact": {"slowdown_pct": None, "exclude": [], "unfinished": [h["host"] for h in hosts]}}


@pytest.mark.parametrize("fmt", ["text", "md", "html"])
def test_every_format_folds_the_unchecked_hosts_of_an_interrupt(fmt: str):
    report = render_report(_interrupted_document(), fmt)
    assert len(re.findall(r"node\[004-064\]", report)) >= 1
    assert "node005" not in report.replace("node[004-064]", "")  # no host said on a line of its own


def test_the_headline_counts_warnings_apart_and_says_each_noun_in_its_number():
    text = render_report(_interrupted_document(), "text")
    headline = text.splitlines()[0]
    assert "62 findings (0 fail, 1 warn, 61 unchecked)" in headline
    assert "unfinished node[004-064] (61 hosts interrupted before they finished" in text
    one = render_report({"sweep_id": "s2", "hosts": [{"host": "a", "status": "ok"}],
                         "findings": [_unchecked("a")]}, "text")
    assert "1 host ·" in one and "1 finding (0 fail, 1 unchecked)" in one
