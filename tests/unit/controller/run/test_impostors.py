"""A host's identity is the controller's: a node whose facts name another host of the sweep, or
whose GPU UUIDs another host reports too, is set aside; the host it names keeps its records."""

from __future__ import annotations

from gpudiag.hosts import another_host_named
from gpudiag.run.impostors import IDENTITY_CONFLICT, impostors, set_aside
from gpudiag.run.outcome import HostOutcome


def _host(name: str, hostname: str | None = None, uuids: tuple[str, ...] = ()) -> HostOutcome:
    facts = {"hostname": hostname if hostname is not None else name, "gpu_uuids": list(uuids),
             "gpus": [{"gpu_uuid": uuid, "nvml_index": index} for index, uuid in enumerate(uuids)]}
    return HostOutcome(name, "ok", None, 1.0, facts)


def test_a_node_whose_facts_name_another_host_is_set_aside_and_that_host_is_untouched():
    hosts = [_host("node01"), _host("node02", "node03.cluster.example"), _host("node03")]
    kept, why = set_aside(hosts)
    assert list(why) == ["node02"] and "'node03.cluster.example', the name of node03" in why["node02"]
    assert [(h.host, h.status) for h in kept] == [("node01", "ok"), ("node02", IDENTITY_CONFLICT), ("node03", "ok")]
    assert kept[1].facts == {} and kept[1].results_count == 0 and kept[2] is hosts[2]


def test_names_that_are_a_nodes_own_or_no_other_hosts_are_its_own_business():
    labels = ["gpu01", "gpu02.dc1", "10.0.0.3", "10.0.0.4"]
    assert another_host_named("dgx-a100-17", "gpu01", labels) is None  # an SSH alias beside the real name
    assert another_host_named("GPU01.example.com", "gpu01", labels) is None  # its own, long and upper case
    assert another_host_named("gpu02", "gpu01", labels) == ("gpu02", "gpu02.dc1")  # another's short name
    assert another_host_named("10.0.0.4", "10.0.0.3", labels) == ("10.0.0.4", "10.0.0.4")
    assert another_host_named("10", "10.0.0.3", labels) is None  # an address is compared whole
    assert impostors([_host("a", "same"), _host("b", "same")]) == {}  # one name for two hosts: neither's label


def test_one_gpu_uuid_on_two_hosts_sets_aside_the_one_the_store_did_not_see_it_on():
    hosts = [_host("node01", uuids=("GPU-aa", "GPU-bb")), _host("node02", uuids=("GPU-aa", "GPU-cc"))]
    why = impostors(hosts, {"GPU-aa": "node01"}.get)
    assert list(why) == ["node02"] and "GPU GPU-aa, which node01 also reports; the store last saw it on node01" in why[
        "node02"]


def test_one_gpu_uuid_on_two_hosts_no_store_can_tell_apart_sets_aside_both():
    hosts = [_host("node01", uuids=("GPU-aa",)), _host("node02", uuids=("GPU-aa",)), _host("node03", uuids=("GPU-z",))]
    why = impostors(hosts, {"GPU-aa": "node09"}.get)  # seen before on a host not in this sweep: no help
    assert sorted(why) == ["node01", "node02"]
    assert all("cannot be told, so none is passed on its word" in text for text in why.values())


def test_a_node_naming_another_host_accuses_no_one_with_the_uuids_it_copied_from_it():
    hosts = [_host("node01", uuids=("GPU-aa",)), _host("node02", "node01", uuids=("GPU-aa",)),
             _host("node03", uuids=("GPU-cc",))]
    kept, why = set_aside(hosts)  # no store to say whose GPU-aa is: the name alone tells the impostor
    assert list(why) == ["node02"] and "the name of node01" in why["node02"]
    assert kept[0] is hosts[0] and kept[2] is hosts[2]
