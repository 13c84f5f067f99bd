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
    ("node1 slots=8", "'node1 slots=8' is an MPI hostfile line"),
    ("node1 slots=8 max_slots=16  # from mpirun", "is an MPI hostfile line"),
    ("10.0.0.1 node1 node1.cluster", "'10.0.0.1 node1 node1.cluster' is an /etc/hosts line"),
    ("::1 localhost ip6-localhost", "is an /etc/hosts line"),
    ("node1 node2", "whitespace inside 'node1 node2'"),
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


@pytest.mark.parametrize("argument", ["missing-hosts.txt", "conf/hosts", "./nodes", "/etc/gpu[1-4]/hosts"])
def test_missing_file_is_reported_as_a_file(argument: str) -> None:
    with pytest.raises(InputError, match="no such hosts file") as caught:
        load_hosts(argument, NO_STDIN)
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(("argument", "expected"), [
    ("node[1-9/2]", ["node1", "node3", "node5", "node7", "node9"]),
    ("gpu[01-64/16],login", ["gpu01", "gpu17", "gpu33", "gpu49", "login"]),
    ("alice@node[0-4/4]:2222", ["node0:2222", "node4:2222"]),
])
def test_step_ranges_are_host_sets_not_paths(argument: str, expected: list[str]) -> None:
    assert labels(load_hosts(argument, NO_STDIN)) == expected


def test_a_step_range_of_a_huge_span_is_sized_by_its_step() -> None:
    assert len(load_hosts("node[0-999999/1000]", NO_STDIN)) == 1000


def test_an_existing_file_wins_over_a_host_set_of_the_same_name(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "node1").write_text("gpu07\n", encoding="utf-8")

    assert labels(load_hosts("node1", NO_STDIN)) == ["gpu07"]


def test_an_unclosed_step_range_is_a_bad_host_set_not_a_missing_file() -> None:
    with pytest.raises(InputError, match="neither a hosts file nor a valid host set: bad host set") as caught:
        load_hosts("node[1-64/2", NO_STDIN)
    assert caught.value.exit_code == 2


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


def test_a_byte_order_mark_is_not_part_of_the_first_host(tmp_path: Path) -> None:
    path = tmp_path / "hosts.txt"
    path.write_bytes(b"\xef\xbb\xbfnode1\r\nnode2 net=10.2.0.2\r\n")

    specs = load_hosts(str(path), NO_STDIN)

    assert [(spec.label, spec.net_address) for spec in specs] == [("node1", None), ("node2", "10.2.0.2")]
    assert labels(load_hosts("-", io.StringIO("\ufeffnode[1-2]\n"))) == ["node1", "node2"]


def test_a_utf16_file_says_to_save_it_as_utf8(tmp_path: Path) -> None:
    path = tmp_path / "hosts.txt"
    path.write_bytes("node1\r\n".encode("utf-16"))

    with pytest.raises(InputError, match=r"UTF-16 text, not UTF-8; fix: save it as UTF-8") as caught:
        load_hosts(str(path), NO_STDIN)
    assert caught.value.exit_code == 2


def test_invalid_utf8_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "hosts.txt"
    path.write_bytes(b"node1\nnode2\nn\xe9ud3\n")

    with pytest.raises(InputError, match=rf"^{path}:3: not UTF-8 text \(byte 0xe9\); fix: save the file as UTF-8"):
        load_hosts(str(path), NO_STDIN)


@pytest.mark.parametrize(("given", "expected"), [
    ("NODE1,node1", ["NODE1"]),
    ("node1,Node[1-2]", ["node1", "Node2"]),
    ("Login.Example.COM,login.example.com", ["Login.Example.COM"]),
])
def test_a_host_given_twice_in_another_case_is_probed_once_under_its_first_spelling(
        given: str, expected: list[str]) -> None:
    assert labels(load_hosts(given, NO_STDIN)) == expected


def test_case_insensitive_duplicates_across_file_lines_keep_the_first_line(tmp_path: Path) -> None:
    text = "alice@GPU01 net=10.2.0.1\nbob@gpu01\ngpu02\nGPU02:22\ngpu02:22\n"
    specs = load_hosts(write_hosts(tmp_path, text), NO_STDIN)

    assert specs == [HostSpec("GPU01", "alice", None), HostSpec("gpu02"), HostSpec("GPU02", None, 22)]
    assert specs[0].net_address == "10.2.0.1"


ACCEPTED = "[user@]host[:port] or a host set such as node[01-64], optionally followed by net=ADDRESS"


OTHER_FORMATS = ["node1 slots=8", "node1 slots=8 max_slots=16", "10.0.0.1 node1 node1.cluster",
                 "::1 localhost ip6-localhost", "node1 node2"]


def test_lines_of_other_host_list_formats_name_the_accepted_formats(tmp_path: Path) -> None:
    for line in OTHER_FORMATS:
        with pytest.raises(InputError, match=r"; fix: write one entry per line: \[user@\]host\[:port\] or a host set "
                           r"such as node\[01-64\], optionally followed by net=ADDRESS; "):
            load_hosts(write_hosts(tmp_path, f"node0\n{line}   # copied from elsewhere\n"), NO_STDIN)


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


@pytest.mark.parametrize(("argument", "expected"), [
    ("alice@node1,bob@node2", [HostSpec("node1", user="alice"), HostSpec("node2", user="bob")]),
    ("alice@node1,node2:2222", [HostSpec("node1", user="alice"), HostSpec("node2", port=2222)]),
    ("alice@node[1-3],bob@gpu[1-2]:22",
     [HostSpec(f"node{n}", user="alice") for n in (1, 2, 3)] + [HostSpec(f"gpu{n}", user="bob", port=22)
                                                                 for n in (1, 2)]),
    ("node[1-3]", [HostSpec(f"node{n}") for n in (1, 2, 3)]),
    ("alice@node[1-3]", [HostSpec(f"node{n}", user="alice") for n in (1, 2, 3)]),
    ("alice@node[1,3]:2222", [HostSpec(f"node{n}", user="alice", port=2222) for n in (1, 3)]),
    ("[::1]:2201,bob@[::2]:2202", [HostSpec("::1", port=2201), HostSpec("::2", user="bob", port=2202)]),
])
def test_each_comma_separated_entry_has_its_own_user_and_port(argument: str, expected: list[HostSpec]) -> None:
    assert load_hosts(argument, NO_STDIN) == expected


def test_the_same_entries_in_a_hosts_file_line_read_alike(tmp_path: Path) -> None:
    specs = load_hosts(write_hosts(tmp_path, "alice@node1,bob@node[2-3]\n"), NO_STDIN)
    assert [(spec.user, spec.host) for spec in specs] == [("alice", "node1"), ("bob", "node2"), ("bob", "node3")]


@pytest.mark.parametrize(("argument", "problem"), [
    ("alice@node1,,bob@node2", "empty host name between commas"),
    ("alice@node1,bob@", "no host name"),
    ("alice@node1,-bob@node2", "'-bob' is not a valid user name"),
])
def test_a_bad_entry_among_commas_is_named_alone(argument: str, problem: str) -> None:
    with pytest.raises(InputError, match="neither a hosts file nor a valid host set") as caught:
        load_hosts(argument, NO_STDIN)
    assert problem in str(caught.value)


def test_comma_joined_sets_are_capped_together_not_each_alone() -> None:
    # each part stays under the cap; together they pass it: refused before anything expands further
    half = 60_000
    with pytest.raises(InputError, match=r"names 120000 hosts, more than 100000"):
        load_hosts(f"a[1-{half}],b[1-{half}]", NO_STDIN)
    assert len(load_hosts(f"a[1-{half}]", NO_STDIN)) == half


@pytest.mark.parametrize("argument", ["a[0-99]b[0-99]c[0-99]d[0-99]", "n[0-9][0-9][0-9][0-9][0-9][0-9]",
                                      "x[1-50000,60000-120000]", "a[1-99999],b[1-9]!b[1-2]"])
def test_a_host_set_too_large_is_refused_from_its_text_before_it_expands(argument: str, monkeypatch) -> None:
    expanded: list[str] = []
    original = NodeSet.__iter__
    monkeypatch.setattr(NodeSet, "__iter__", lambda self: (expanded.append(str(self)), original(self))[1])
    with pytest.raises(InputError, match=r"more than 100000") as caught:
        load_hosts(argument, NO_STDIN)
    assert caught.value.exit_code == ExitCode.USAGE and expanded == []


def test_a_host_name_longer_than_dns_allows_is_refused_and_quoted_short(tmp_path: Path) -> None:
    for name, problem in (("a" * 254, "is 254 characters long, more than a host name's 253"),
                          ("x" * 64 + ".example.com", "has a part between dots longer than 63 characters"),
                          ("a" * 200_000, "a host set of 200000 characters")):
        path = write_hosts(tmp_path, f"node1\n{name}\n")
        with pytest.raises(InputError) as caught:
            load_hosts(path, NO_STDIN)
        message = str(caught.value)
        assert problem in message and f"{path}:2" in message and len(message) < 400, message
    assert labels(load_hosts("a" * 63 + "." + "b" * 63, NO_STDIN)) == ["a" * 63 + "." + "b" * 63]
    assert labels(load_hosts("[fe80::1%eth0]", NO_STDIN)) == ["fe80::1%eth0"]
