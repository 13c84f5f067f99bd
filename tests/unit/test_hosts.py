"""Host lists: files, stdin and inline node sets, expanded in the order given; bad lines name themselves."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import pytest
from ClusterShell.NodeSet import NodeSet

from gpudiag.errors import InputError
from gpudiag.exitcodes import ExitCode
from gpudiag.hosts import HostSpec, fold_hosts, load_hosts

NO_STDIN = io.StringIO("")


def write_hosts(tmp_path: Path, text: str) -> str:
    path = tmp_path / "hosts.txt"
    path.write_text(text, encoding="utf-8")
    return str(path)


def labels(specs: list[HostSpec]) -> list[str]:
    return [spec.label for spec in specs]


def test_file_with_comments_ranges_users_ports_and_duplicates_keeps_given_order(tmp_path: Path) -> None:
    path = write_hosts(tmp_path, "\n".join([
        "# rack 7",
        "node[003-004]",
        "",
        "   alice@gpu[01-02]:2222   # trailing comment",
        "node001",
        "node003            # again: folded into its first place",
        "bob@gpu01:2222",
        "login.example.com",
        "",
    ]))

    specs = load_hosts(path, NO_STDIN)

    assert labels(specs) == ["node003", "node004", "gpu01:2222", "gpu02:2222", "node001", "login.example.com"]
    assert specs[2] == HostSpec(host="gpu01", user="alice", port=2222)
    assert specs[0] == HostSpec(host="node003", user=None, port=None)


def test_large_range_expands_with_padding(tmp_path: Path) -> None:
    specs = load_hosts(write_hosts(tmp_path, "node[001-128,130]\n"), NO_STDIN)

    assert len(specs) == 129
    assert specs[0].host == "node001" and specs[127].host == "node128" and specs[-1].host == "node130"


def test_same_host_on_another_port_is_another_host(tmp_path: Path) -> None:
    specs = load_hosts(write_hosts(tmp_path, "127.0.0.1:2201\n127.0.0.1:2202\n127.0.0.1:2201\n"), NO_STDIN)

    assert labels(specs) == ["127.0.0.1:2201", "127.0.0.1:2202"]


@pytest.mark.parametrize(("line", "problem"), [
    ("node[1-", "bad host set"),
    ("node[5-1]", "bad host set"),
    ("node1:0", "port '0'"),
    ("node1:65536", "port '65536'"),
    ("node1:ssh", "port 'ssh'"),
    ("node1:", "port ''"),
    ("@node1", "empty user name"),
    ("node 1", "whitespace"),
    ("node$1", "not a valid host name"),
    ("-oProxyCommand=x", "not a valid host name"),
    ("a,,b", "empty host name"),
    ("[::zz]:22", "not an IPv6 address"),
    ("node1:22:33", "not an IPv6 address"),
    ("node[1-999999]", "more than"),
])
def test_malformed_line_names_file_and_line(tmp_path: Path, line: str, problem: str) -> None:
    path = write_hosts(tmp_path, f"# fleet\nnode001\n\n{line}\nnode002\n")

    with pytest.raises(InputError) as caught:
        load_hosts(path, NO_STDIN)

    message = str(caught.value)
    assert message.startswith(f"{path}:4: ")
    assert problem in message
    assert "; fix: " in message
    assert "\n" not in message
    assert caught.value.exit_code == ExitCode.USAGE
    assert int(caught.value.exit_code) == 2


def test_stdin_has_the_same_format_and_is_named_in_errors() -> None:
    specs = load_hosts("-", io.StringIO("# from slurm\nnode[1-2]\nroot@node3:22\n"))
    assert labels(specs) == ["node1", "node2", "node3:22"]

    with pytest.raises(InputError, match=r"^<stdin>:2: "):
        load_hosts("-", io.StringIO("node1\nnode[1-\n"))


@pytest.mark.parametrize(("argument", "expected"), [
    ("gpu[01-04]", ["gpu01", "gpu02", "gpu03", "gpu04"]),
    ("node2,node1", ["node2", "node1"]),
    ("node[1-3],login", ["node1", "node2", "node3", "login"]),
    ("node[1-5]!node3", ["node1", "node2", "node4", "node5"]),
    ("alice@gpu[01-02]:2222", ["gpu01:2222", "gpu02:2222"]),
    ("localhost", ["localhost"]),
])
def test_inline_host_sets(argument: str, expected: list[str]) -> None:
    assert labels(load_hosts(argument, NO_STDIN)) == expected


def test_inline_user_and_port_apply_to_every_host() -> None:
    specs = load_hosts("alice@gpu[01-02]:2222", NO_STDIN)

    assert {spec.user for spec in specs} == {"alice"}
    assert {spec.port for spec in specs} == {2222}


def test_inline_garbage_is_neither_file_nor_host_set() -> None:
    with pytest.raises(InputError, match="neither a hosts file nor a valid host set") as caught:
        load_hosts("node[1-", NO_STDIN)
    assert caught.value.exit_code == 2


@pytest.mark.parametrize("argument", ["missing-hosts.txt", "conf/hosts", "./nodes"])
def test_missing_file_is_reported_as_a_file(argument: str) -> None:
    with pytest.raises(InputError, match="no such hosts file"):
        load_hosts(argument, NO_STDIN)


def test_directory_is_not_a_hosts_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a regular file"):
        load_hosts(str(tmp_path), NO_STDIN)


@pytest.mark.parametrize("text", ["", "\n\n", "# only comments\n  # and more\n"])
def test_no_hosts_is_an_input_error(tmp_path: Path, text: str) -> None:
    path = write_hosts(tmp_path, text)

    with pytest.raises(InputError, match=f"^no hosts in {path}"):
        load_hosts(path, NO_STDIN)


def test_inline_set_that_empties_itself_has_no_hosts() -> None:
    with pytest.raises(InputError, match="no hosts in"):
        load_hosts("node[1-2]!node[1-2]", NO_STDIN)


def test_binary_file_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "hosts.bin"
    path.write_bytes(b"\xff\xfe\x00node1")

    with pytest.raises(InputError, match="not UTF-8"):
        load_hosts(str(path), NO_STDIN)


def test_first_user_wins_for_a_repeated_host(tmp_path: Path) -> None:
    specs = load_hosts(write_hosts(tmp_path, "alice@node1\nbob@node1\n"), NO_STDIN)

    assert specs == [HostSpec(host="node1", user="alice", port=None)]


def test_ipv6_literals(tmp_path: Path) -> None:
    specs = load_hosts(write_hosts(tmp_path, "[::1]:2222\nroot@[fe80::1]\n::1\n"), NO_STDIN)

    assert specs == [HostSpec("::1", None, 2222), HostSpec("fe80::1", "root", None), HostSpec("::1", None, None)]
    assert labels(specs) == ["[::1]:2222", "fe80::1", "::1"]


def test_label_and_is_local() -> None:
    assert HostSpec("node1", "alice", None).label == "node1"
    assert HostSpec("node1", "alice", 2222).label == "node1:2222"
    assert HostSpec("localhost").is_local
    assert not HostSpec("localhost", port=2222).is_local
    assert not HostSpec("127.0.0.1").is_local
    assert not HostSpec("::1").is_local


def test_fold_hosts_compact_form() -> None:
    names = [f"node{number:03d}" for number in range(1, 65) if number != 63]

    assert fold_hosts(names) == "node[001-062,064]"
    assert fold_hosts([]) == ""


def test_fold_hosts_round_trips_and_ignores_order() -> None:
    given = ["node[001-004]", "gpu[01-02]:2222", "10.0.0.[1-3]", "login"]
    names = [label for spec in given for label in NodeSet(spec)]

    folded = {fold_hosts(order) for order in itertools.islice(itertools.permutations(names), 50)}
    folded.add(fold_hosts(reversed(names)))

    assert len(folded) == 1
    assert set(NodeSet(folded.pop())) == set(names)


def test_fold_hosts_keeps_ipv6_labels_verbatim() -> None:
    assert fold_hosts(["[::1]:2222", "node2", "node1", "::1"]) == "node[1-2],::1,[::1]:2222"


def test_a_per_host_data_address_field_is_read_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "hosts.txt"
    path.write_text("node01 net=10.2.0.1   # data plane on ib0\nroot@node02:2222 net=[fd00::2]\nnode03\n")
    hosts = load_hosts(str(path), io.StringIO())
    assert [(h.label, h.user, h.net_address) for h in hosts] == [
        ("node01", None, "10.2.0.1"), ("node02:2222", "root", "fd00::2"), ("node03", None, None)]
    for line, message in (("node[01-02] net=10.2.0.1", "net=10.2.0.1 given for 2 hosts at once"),
                          ("node01 rack=7", "unknown field 'rack=7'"),
                          ("node01 net=10.2.0.1/24", "net='10.2.0.1/24' is not a host name or IP address"),
                          ("node01 node02", "whitespace inside 'node01 node02'")):
        path.write_text(f"node00\n{line}\n")
        with pytest.raises(InputError) as error:
            load_hosts(str(path), io.StringIO())
        assert str(error.value).startswith(f"{path}:2: ") and message in str(error.value)
