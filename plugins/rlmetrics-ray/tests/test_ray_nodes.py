"""Nodes from ``ray.nodes()`` entries (Ray 2.60's real one), hosts, and endpoint URLs."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from ray_support import NODE_FIXTURE, node_info
from rlmetrics_ray.nodes import (
    Host,
    RayNode,
    alive_nodes,
    group_by_host,
    loopback_metrics_url,
    metrics_url,
    ray_nodes,
)


def test_the_real_entry_gives_the_node_and_its_endpoint() -> None:
    node = RayNode.from_ray(NODE_FIXTURE)
    assert node == RayNode(
        node_id=NODE_FIXTURE["NodeID"],
        address=NODE_FIXTURE["NodeManagerAddress"],
        hostname=NODE_FIXTURE["NodeManagerHostname"],
        metrics_port=NODE_FIXTURE["MetricsExportPort"],
    )
    assert node.host_name == NODE_FIXTURE["NodeManagerHostname"]
    assert metrics_url(node) == (
        f"http://{NODE_FIXTURE['NodeManagerAddress']}:{NODE_FIXTURE['MetricsExportPort']}/metrics"
    )


def test_a_node_without_hostname_is_named_by_its_address() -> None:
    node = RayNode.from_ray(node_info("a" * 56, "", 8080, address="10.1.2.3"))
    assert node is not None and node.host_name == "10.1.2.3"


def test_dead_and_malformed_entries_are_not_nodes() -> None:
    assert RayNode.from_ray(node_info("a" * 56, "h", 8080, alive=False)) is None
    assert RayNode.from_ray({**node_info("a" * 56, "h", 8080), "NodeID": ""}) is None
    assert RayNode.from_ray({**node_info("a" * 56, "h", 8080), "NodeManagerAddress": None}) is None


def test_a_node_without_a_usable_metrics_port_has_no_endpoint() -> None:
    for port in (None, 0, -1, 70000, True, "8080"):
        node = RayNode.from_ray(node_info("a" * 56, "h", port))  # type: ignore[arg-type]
        assert node is not None and node.metrics_port is None
        assert metrics_url(node) is None and loopback_metrics_url(node) is None


def test_urls_of_ipv4_ipv6_and_loopback() -> None:
    v4 = RayNode("n", "10.0.0.7", "h", 8080)
    v6 = RayNode("n", "fd00::7", "h", 8080)
    assert metrics_url(v4) == "http://10.0.0.7:8080/metrics"
    assert metrics_url(v6) == "http://[fd00::7]:8080/metrics"
    assert loopback_metrics_url(v4) == loopback_metrics_url(v6) == "http://127.0.0.1:8080/metrics"


def test_raylets_sharing_a_host_are_one_host() -> None:
    infos = [
        node_info("c" * 56, "gpu-1", 8082),
        node_info("a" * 56, "gpu-1", 8080),
        node_info("b" * 56, "gpu-2", 8081),
        node_info("d" * 56, "gpu-1", None),
        node_info("e" * 56, "gpu-3", 8083, alive=False),
    ]
    hosts = group_by_host(alive_nodes(infos))
    assert [host.name for host in hosts] == ["gpu-1", "gpu-2"]
    gpu1 = hosts[0]
    assert [node.node_id for node in gpu1.nodes] == ["a" * 56, "c" * 56, "d" * 56]
    assert gpu1.target.node_id == "a" * 56


def test_the_target_is_the_first_node_with_an_endpoint() -> None:
    host = Host("h", (RayNode("a", "x", "h", None), RayNode("b", "x", "h", 9000)))
    assert host.target.node_id == "b"
    only = Host("h", (RayNode("a", "x", "h", None),))
    assert only.target.node_id == "a"


def test_a_node_listed_twice_counts_once() -> None:
    info = node_info("a" * 56, "h", 8080)
    assert len(alive_nodes([info, dict(info), "not a mapping"])) == 1  # type: ignore[list-item]


def test_ray_nodes_is_empty_while_ray_is_not_initialised() -> None:
    import sys

    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        assert list(ray_nodes()) == []


node_ids = st.text(alphabet="0123456789abcdef", min_size=1, max_size=8)
host_names = st.sampled_from(["", "h1", "h2", "h3"])
infos = st.lists(
    st.builds(
        node_info,
        node_ids,
        host_names,
        st.one_of(st.none(), st.integers(1, 65535)),
        address=st.sampled_from(["10.0.0.1", "10.0.0.2"]),
        alive=st.booleans(),
    ),
    max_size=12,
)


@settings(max_examples=150)
@given(infos)
def test_every_alive_node_is_in_exactly_one_host_named_after_it(entries: list[dict]) -> None:  # type: ignore[type-arg]
    nodes = alive_nodes(entries)
    hosts = group_by_host(nodes)
    names = [host.name for host in hosts]
    assert names == sorted(set(names))
    grouped = [node for host in hosts for node in host.nodes]
    assert sorted(grouped, key=lambda n: n.node_id) == sorted(nodes, key=lambda n: n.node_id)
    for host in hosts:
        assert all(node.host_name == host.name for node in host.nodes)
        assert host.target in host.nodes
        if any(node.metrics_port is not None for node in host.nodes):
            assert host.target.metrics_port is not None
    first_alive = {}
    for entry in entries:
        if entry["Alive"]:
            first_alive.setdefault(entry["NodeID"], entry)
    assert {node.node_id for node in nodes} == set(first_alive)
