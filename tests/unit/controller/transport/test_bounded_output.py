"""What one command may print, bounded (gpudiag.transport.bounded): whole lines kept up to the caps
whatever the chunks, the cap named when passed, and stderr's last bytes."""

from __future__ import annotations

import threading

import pytest

from gpudiag.transport import remotepid
from gpudiag.transport.bounded import BoundedOutput, OutputLimits, TailBuffer

LIMITS = OutputLimits(max_bytes=64, max_line_bytes=16, stderr_tail_bytes=8)


def _fed(chunks: list[bytes], limits: OutputLimits = LIMITS) -> BoundedOutput:
    output = BoundedOutput(limits)
    for chunk in chunks:
        if not output.feed(chunk):
            break
    output.end()
    return output


def test_a_line_exactly_at_the_cap_is_kept_and_one_byte_more_is_the_cap_named():
    at_cap = _fed([b"x" * 16 + b"\n"])
    assert at_cap.overflow is None and at_cap.text() == "x" * 16 + "\n"
    over = BoundedOutput(LIMITS)
    assert over.feed(b"x" * 16) is True  # no newline yet: still within the cap
    assert over.feed(b"x") is False
    assert over.overflow is not None and "a line longer than 16 bytes" in over.overflow
    assert "--max-line-kib" in over.overflow  # the message says how to raise it
    assert over.feed(b"\nmore\n") is False and over.text() == ""  # nothing kept past the cap


def test_a_line_split_over_many_chunks_counts_as_one_line():
    within = _fed([b"abcd", b"efgh", b"ijkl", b"mnop\nq"])
    assert within.overflow is None and within.text() == "abcdefghijklmnop\nq\n"
    across = _fed([b"abcdefgh", b"ijklmnop", b"q\n"])
    assert across.overflow is not None and across.text() == ""


def test_the_total_is_capped_by_whole_lines_and_what_came_before_the_cap_is_kept():
    lines = [f"line {n:02d}\n".encode() for n in range(20)]  # 8 bytes each: 8 lines fit in 64
    output = _fed([b"".join(lines)])
    assert output.overflow is not None and "more than 64 bytes of output" in output.overflow
    assert output.text() == "".join(line.decode() for line in lines[:8])
    exactly = _fed([b"".join(lines[:8])])
    assert exactly.overflow is None and exactly.text().count("\n") == 8


def test_a_last_line_without_its_newline_is_kept_at_the_end():
    output = _fed([b"first\nlast"])
    assert output.text() == "first\nlast\n" and output.first_line(0) == "first"
    assert _fed([b"only"]).first_line(0) == "only"
    assert _fed([]).text() == "" and _fed([]).first_line(0) is None


def test_a_multibyte_character_split_across_chunks_is_whole_in_its_line():
    text = "GPU 3: température 87 °C ✓\n".encode()
    cut = text.index("é".encode()) + 1  # inside the two bytes of é
    limits = OutputLimits(max_bytes=1024, max_line_bytes=64, stderr_tail_bytes=64)
    output = _fed([text[:cut], text[cut:cut + 1], text[cut + 1:]], limits)
    assert output.text() == text.decode()


def test_first_line_waits_for_a_whole_line_and_gives_none_at_an_overflow():
    output = BoundedOutput(LIMITS)
    seen: list[str | None] = []
    waiter = threading.Thread(target=lambda: seen.append(output.first_line(30.0)))
    waiter.start()
    output.feed(b"listen ")
    output.feed(b"port 5\n")
    waiter.join(30.0)
    assert seen == ["listen port 5"]
    flooded = BoundedOutput(LIMITS)
    waiter = threading.Thread(target=lambda: seen.append(flooded.first_line(30.0)))
    waiter.start()
    flooded.feed(b"y" * 100)  # one endless line: the waiter is told at once, not at its timeout
    waiter.join(30.0)
    assert seen[-1] is None and not waiter.is_alive()


def test_the_error_tail_keeps_the_last_bytes_and_says_how_many_were_dropped():
    tail = TailBuffer(8)
    tail.feed(b"0123")
    tail.feed(b"456789")
    assert tail.text().endswith("\n23456789") and "[2 earlier bytes of error output dropped]" in tail.text()
    whole = TailBuffer(8)
    whole.feed(b"abc")
    assert whole.text() == "abc"
    huge = TailBuffer(8)
    huge.feed(b"x" * 1000 + b"reason!!")
    assert huge.text().endswith("\nreason!!") and "[1000 earlier" in huge.text()


def test_the_error_tail_leaves_out_a_character_its_cut_split():
    tail = TailBuffer(5)
    tail.feed("ab€cd\n".encode())  # € is 3 bytes: the last 5 bytes start inside it
    assert tail.text() == "[3 earlier bytes of error output dropped]\ncd\n"


def test_limits_refuse_a_line_cap_above_the_whole():
    with pytest.raises(ValueError, match="no longer than the whole"):
        OutputLimits(max_bytes=10, max_line_bytes=11)
    assert OutputLimits().describe() == "16 MiB of output, 1 MiB a line"


# --- a remote command's stderr and its PID line (transport/remotepid.py) ----------------------------------

MARKER = "gpudiag-pid-00ff00ff00ff00ff="


def _error_output(chunks: list[bytes]) -> remotepid.ErrorOutput:
    output = remotepid.ErrorOutput(4096, MARKER)
    for chunk in chunks:
        output.feed(chunk)
    return output


def test_the_pid_line_is_found_after_a_login_shells_warnings_in_any_chunking():
    said = (b"pyenv: cannot rehash: couldn't acquire lock\n"
            b"gpudiag-pid-0123456789abcdef=1\n"  # another command's marker: not ours
            b"unfinished" + MARKER.encode() + b"4242\nthe command's own error\n")
    for size in (1, 7, len(said)):
        output = _error_output([said[i:i + size] for i in range(0, len(said), size)])
        assert output.pid == 4242
        assert output.text() == ("pyenv: cannot rehash: couldn't acquire lock\ngpudiag-pid-0123456789abcdef=1\n"
                                 "unfinished\nthe command's own error\n")


def test_a_pid_line_past_the_first_bytes_of_stderr_or_not_a_number_is_not_taken():
    late = _error_output([b"x" * (remotepid.PID_SCAN_BYTES + 10) + b"\n", MARKER.encode() + b"17\n"])
    assert late.pid is None and MARKER in late.text()
    for wrong in (b"17x", b"", b"-17", b"1" * 11):
        assert _error_output([MARKER.encode() + wrong + b"\n"]).pid is None
