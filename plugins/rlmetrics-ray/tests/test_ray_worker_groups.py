"""The worker-group registry: names, placement groups resolved through Ray's placement group
table (Ray 2.60's real entry), and what happens when reading it fails."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ray_support import PLACEMENT_GROUP_TABLE
from rlmetrics_ray.worker_groups import NONE, WorkerGroups, label, nodes_of

NODE = PLACEMENT_GROUP_TABLE["bundles_to_node_id"]["0"]


class PlacementGroup:
    """Stands in for ``ray.util.placement_group.PlacementGroup``, which needs a cluster; the
    table it resolves to is Ray's real one, edited."""

    def __init__(self, table: Mapping[str, Any]) -> None:
        self.table = dict(table)


class TableReader:
    """Reads a placement group's table, or raises while ``failing``."""

    def __init__(self) -> None:
        self.failing = False
        self.reads = 0

    def __call__(self, group: Any) -> Mapping[str, Any]:
        self.reads += 1
        if self.failing:
            raise ConnectionError("GCS unavailable")
        return group.table  # type: ignore[no-any-return]


def table(*node_ids: str, state: str = "CREATED") -> dict[str, Any]:
    out = copy.deepcopy(PLACEMENT_GROUP_TABLE)
    out["bundles"] = {str(i): {"CPU": 1.0} for i in range(len(node_ids))}
    out["bundles_to_node_id"] = {str(i): node for i, node in enumerate(node_ids)}
    out["state"] = state
    return out


def test_label_sorts_and_joins_or_says_none() -> None:
    assert label([]) == NONE
    assert label(["vllm_policy", "lm_policy", "lm_policy"]) == "lm_policy,vllm_policy"


def test_the_real_table_resolves_to_its_node() -> None:
    assert nodes_of(PLACEMENT_GROUP_TABLE) == {NODE}


def test_unplaced_and_removed_groups_resolve_to_no_node() -> None:
    assert nodes_of(table("", "")) == frozenset()
    assert nodes_of({**PLACEMENT_GROUP_TABLE, "bundles_to_node_id": {}}) == frozenset()
    assert nodes_of(table(NODE, state="REMOVED")) == frozenset()
    assert nodes_of({}) == frozenset()


def test_groups_are_mapped_to_every_node_they_hold_a_bundle_on() -> None:
    reader = TableReader()
    groups = WorkerGroups(reader)
    groups.register("lm_policy", PlacementGroup(table("n1", "n2", "n2")))
    groups.register("vllm_policy", [PlacementGroup(table("n2")), PlacementGroup(table("n3"))])
    groups.register_nodes("reward", ["n3"])
    assert groups.by_node() == {
        "n1": {"lm_policy"},
        "n2": {"lm_policy", "vllm_policy"},
        "n3": {"vllm_policy", "reward"},
    }
    assert groups.names() == ["lm_policy", "reward", "vllm_policy"]


def test_nothing_is_read_until_groups_are_resolved() -> None:
    reader = TableReader()
    groups = WorkerGroups(reader)
    groups.register("lm_policy", PlacementGroup(table("n1")))
    assert reader.reads == 0
    groups.by_node()
    assert reader.reads == 1


def test_a_group_placed_later_is_followed() -> None:
    group = PlacementGroup(table("", ""))
    groups = WorkerGroups(TableReader())
    groups.register("lm_policy", group)
    assert groups.by_node() == {}
    group.table = table("n1", "n2")
    assert groups.by_node() == {"n1": {"lm_policy"}, "n2": {"lm_policy"}}
    group.table = table("n1", "n2", state="REMOVED")
    assert groups.by_node() == {}


def test_a_failed_table_read_keeps_the_last_resolution() -> None:
    reader = TableReader()
    group = PlacementGroup(table("n1"))
    groups = WorkerGroups(reader)
    groups.register("lm_policy", group)
    assert groups.by_node() == {"n1": {"lm_policy"}}
    reader.failing = True
    group.table = table("n2")
    assert groups.by_node() == {"n1": {"lm_policy"}}
    reader.failing = False
    assert groups.by_node() == {"n2": {"lm_policy"}}


def test_a_group_that_never_resolved_is_on_no_node_while_reads_fail() -> None:
    reader = TableReader()
    reader.failing = True
    groups = WorkerGroups(reader)
    groups.register("lm_policy", PlacementGroup(table("n1")))
    groups.register_nodes("reward", ["n1"])
    assert groups.by_node() == {"n1": {"reward"}}


def test_registering_again_replaces_and_unregistering_forgets() -> None:
    groups = WorkerGroups(TableReader())
    groups.register("lm_policy", PlacementGroup(table("n1")))
    groups.register_nodes("lm_policy", ["n9"])
    assert groups.by_node() == {"n9": {"lm_policy"}}
    groups.register("lm_policy", PlacementGroup(table("n2")))
    assert groups.by_node() == {"n2": {"lm_policy"}}
    groups.unregister("lm_policy")
    groups.unregister("never-registered")
    assert groups.by_node() == {} and groups.names() == []


@pytest.mark.parametrize("name", ["", "  ", "lm,policy", NONE, None, 3])
def test_a_name_that_cannot_be_a_label_is_refused(name: Any) -> None:
    groups = WorkerGroups(TableReader())
    with pytest.raises(ValueError, match="worker group"):
        groups.register(name, PlacementGroup(table("n1")))
    with pytest.raises(ValueError, match="worker group"):
        groups.register_nodes(name, ["n1"])


def test_empty_registrations_are_refused() -> None:
    groups = WorkerGroups(TableReader())
    with pytest.raises(ValueError, match="no placement group"):
        groups.register("lm_policy", [])
    with pytest.raises(ValueError, match="node ids"):
        groups.register_nodes("lm_policy", ["n1", ""])


names = st.sampled_from(["lm_policy", "vllm_policy", "reward", "critic"])
registrations = st.dictionaries(names, st.frozensets(st.sampled_from(["n1", "n2", "n3"])))


@settings(max_examples=100)
@given(registrations)
def test_by_node_inverts_the_registrations(placed: dict[str, frozenset[str]]) -> None:
    groups = WorkerGroups(TableReader())
    for name, nodes in placed.items():
        groups.register("x" + name, PlacementGroup(table(*sorted(nodes))))
        groups.register_nodes(name, nodes)
    by_node = groups.by_node()
    for node, members in by_node.items():
        assert members == {n for n, ns in placed.items() if node in ns} | {
            "x" + n for n, ns in placed.items() if node in ns
        }
    assert set(by_node) == set().union(*placed.values()) if placed else by_node == {}
    for node in by_node:
        assert label(by_node[node]).split(",") == sorted(by_node[node])
