"""HostMemoryMonitor against HTTP servers on 127.0.0.1 serving Ray 2.60's real node
exposition, exported through the real OpenTelemetry SDK with an in-memory reader.

The monitor is started the way users get it (``configure`` then ``rlmetrics.start()``); its
timer is set far out and every test drives cycles itself with ``refresh()``, so nothing
waits on a clock.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ray_support import (
    WAIT_S,
    Cluster,
    ExpositionServer,
    dead_port,
    render_exposition,
    wait_until,
)
from rlmetrics_ray import active_monitor, configure, register_worker_group_nodes
from rlmetrics_ray.host_memory import TOTAL, USED
from rlmetrics_ray.monitor import HostMemory, HostMemoryMonitor, build_snapshot
from rlmetrics_ray.nodes import RayNode, metrics_url
from rlmetrics_ray.worker_groups import WorkerGroups

from rlmetrics.testing import BlackHole, in_memory_telemetry, isolated_state, points

GiB = 1024**3
Serve = Callable[..., ExpositionServer]


def memory(
    used: float, total: float, used_host: float | None = None, total_host: float | None = None
) -> str:
    return render_exposition(used=used, total=total, used_host=used_host, total_host=total_host)


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


@pytest.fixture
def started(cluster: Cluster) -> Iterator[Callable[..., tuple[HostMemoryMonitor, Any]]]:
    """Start telemetry whose host memory monitor reads ``cluster``; returns (monitor,
    reader) once its first cycle is done. Later cycles: ``monitor.refresh()``."""
    with contextlib.ExitStack() as stack:

        def start(**settings: Any) -> tuple[HostMemoryMonitor, Any]:
            configure(nodes=cluster, interval_s=3600.0, **settings)
            stack.enter_context(isolated_state())
            _handle, reader = stack.enter_context(in_memory_telemetry())
            monitor = active_monitor()
            assert monitor is not None, "telemetry_started did not start the monitor"
            assert monitor.wait_for_cycles(1, WAIT_S)
            return monitor, reader

        yield start


def host_points(reader: Any) -> dict[tuple[str, str], tuple[float, dict[str, str]]]:
    """(metric, host.name) → (value, attributes) of one collection; fails on duplicates."""
    out: dict[tuple[str, str], tuple[float, dict[str, str]]] = {}
    for point in points(reader):
        if point.name in (USED, TOTAL):
            key = (point.name, point.attributes["host.name"])
            assert key not in out, f"two points for {key}: {out[key]} and {point}"
            assert point.unit == "By" and point.kind == "gauge"
            out[key] = (point.value, point.attributes)
    return out


def attributes(host: str, groups: str = "none", source: str = "host") -> dict[str, str]:
    return {"host.name": host, "rl.worker_groups": groups, "rl.host.memory.source": source}


# -- what is exported ------------------------------------------------------------------------


def test_the_exported_host_series_are_exactly_one_point_per_host_and_value(
    serve: Serve, cluster: Cluster, started: Any
) -> None:
    # The same literal is asserted on SDK 1.44.0, 1.45.1 and 1.45.2 (tox envs), which makes
    # the host series identical across both SDK families.
    a = serve(memory(1 * GiB, 4 * GiB, 3 * GiB, 16 * GiB))
    b = serve(memory(2 * GiB, 8 * GiB))  # a Ray without the *_host series
    cluster.add("a" * 56, "gpu-1", a.port)
    cluster.add("b" * 56, "gpu-2", b.port)
    _monitor, reader = started()
    assert host_points(reader) == {
        (USED, "gpu-1"): (3 * GiB, attributes("gpu-1")),
        (TOTAL, "gpu-1"): (16 * GiB, attributes("gpu-1")),
        (USED, "gpu-2"): (2 * GiB, attributes("gpu-2", source="cgroup")),
        (TOTAL, "gpu-2"): (8 * GiB, attributes("gpu-2", source="cgroup")),
    }


def test_co_located_raylets_are_scraped_once_and_their_groups_merged(
    serve: Serve, cluster: Cluster, started: Any
) -> None:
    first = serve(memory(1 * GiB, 4 * GiB, 5 * GiB, 16 * GiB))
    second = serve(memory(1 * GiB, 4 * GiB, 5 * GiB, 16 * GiB))  # same machine, same figures
    cluster.add("b" * 56, "gpu-1", second.port)
    cluster.add("a" * 56, "gpu-1", first.port)
    register_worker_group_nodes("vllm_policy", ["b" * 56])
    register_worker_group_nodes("lm_policy", ["a" * 56])
    monitor, reader = started()
    assert host_points(reader) == {
        (USED, "gpu-1"): (5 * GiB, attributes("gpu-1", "lm_policy,vllm_policy")),
        (TOTAL, "gpu-1"): (16 * GiB, attributes("gpu-1", "lm_policy,vllm_policy")),
    }
    assert (first.requests, second.requests) == (1, 0)
    assert monitor.snapshot.failures == ()


def test_a_label_change_reports_only_the_new_label(
    serve: Serve, cluster: Cluster, started: Any
) -> None:
    server = serve(memory(1 * GiB, 4 * GiB, 3 * GiB, 16 * GiB))
    cluster.add("a" * 56, "gpu-1", server.port)
    monitor, reader = started()
    assert host_points(reader)[(USED, "gpu-1")][1] == attributes("gpu-1", "none")

    register_worker_group_nodes("lm_policy", ["a" * 56])  # the groups are built, minutes in
    monitor.refresh()
    for _ in range(3):  # on 1.45 a synchronous gauge would keep the "none" series forever
        assert host_points(reader) == {
            (USED, "gpu-1"): (3 * GiB, attributes("gpu-1", "lm_policy")),
            (TOTAL, "gpu-1"): (16 * GiB, attributes("gpu-1", "lm_policy")),
        }

    register_worker_group_nodes("vllm_policy", ["a" * 56])
    monitor.refresh()
    assert {v[1]["rl.worker_groups"] for v in host_points(reader).values()} == {
        "lm_policy,vllm_policy"
    }


@pytest.mark.parametrize("failure", ["http-500", "refused", "black-hole", "held", "garbage"])
def test_a_failed_or_slow_scrape_leaves_a_gap_not_the_last_value(
    failure: str, serve: Serve, cluster: Cluster, started: Any, black_hole: BlackHole
) -> None:
    healthy = serve(memory(1 * GiB, 4 * GiB, 3 * GiB, 16 * GiB))
    failing = serve(memory(2 * GiB, 8 * GiB, 6 * GiB, 32 * GiB))
    cluster.add("a" * 56, "gpu-1", healthy.port)
    node = cluster.add("b" * 56, "gpu-2", failing.port)
    monitor, reader = started(timeout_s=0.5)
    assert set(host_points(reader)) == {(m, h) for m in (USED, TOTAL) for h in ("gpu-1", "gpu-2")}

    if failure == "http-500":
        failing.set(mode="error")
    elif failure == "refused":
        node["MetricsExportPort"] = dead_port()
    elif failure == "black-hole":
        node["MetricsExportPort"] = black_hole.port
    elif failure == "held":
        failing.set(mode="hold")
    else:
        failing.set(text="# the agent restarted and serves nothing yet\n")
    snapshot = monitor.refresh()
    assert host_points(reader) == {
        (USED, "gpu-1"): (3 * GiB, attributes("gpu-1")),
        (TOTAL, "gpu-1"): (16 * GiB, attributes("gpu-1")),
    }
    assert [host for host, _cause in snapshot.failures] == ["gpu-2"]

    node["MetricsExportPort"] = failing.port
    failing.set(text=memory(2 * GiB, 8 * GiB, 7 * GiB, 32 * GiB), mode="ok")
    failing.release()
    monitor.refresh()
    assert host_points(reader)[(USED, "gpu-2")] == (7 * GiB, attributes("gpu-2"))


def test_a_collection_never_waits_on_a_slow_endpoint(
    serve: Serve, cluster: Cluster, started: Any
) -> None:
    fast = serve(memory(1 * GiB, 4 * GiB, 3 * GiB, 16 * GiB))
    slow = serve(memory(2 * GiB, 8 * GiB, 6 * GiB, 32 * GiB))
    cluster.add("a" * 56, "gpu-1", fast.port)
    cluster.add("b" * 56, "gpu-2", slow.port)
    monitor, reader = started(timeout_s=WAIT_S)
    before = host_points(reader)
    assert len(before) == 4

    slow.set(text=memory(2 * GiB, 8 * GiB, 9 * GiB, 32 * GiB), mode="hold")
    cycle = threading.Thread(target=monitor.refresh)
    cycle.start()
    try:
        assert slow.arrived.wait(WAIT_S), "the cycle never reached the slow endpoint"
        # The cycle is stuck on the slow node right now; a collection returns anyway, with
        # the previous snapshot, because the callbacks never do I/O.
        during = host_points(reader)
        assert cycle.is_alive() and slow.holding
        assert during == before
    finally:
        slow.release()
        cycle.join(WAIT_S)
    assert not cycle.is_alive()
    assert host_points(reader)[(USED, "gpu-2")][0] == 9 * GiB


def test_every_endpoint_is_scraped_at_once(serve: Serve, cluster: Cluster) -> None:
    held = [serve(memory(1 * GiB, 4 * GiB), mode="hold") for _ in range(4)]
    for index, server in enumerate(held):
        cluster.add(str(index) * 56, f"gpu-{index}", server.port)
    monitor = HostMemoryMonitor(nodes=cluster, timeout_s=WAIT_S, worker_groups=WorkerGroups())
    cycle = threading.Thread(target=monitor.refresh)
    cycle.start()
    try:
        # Every request arrives while none has been answered: they are in flight together.
        for server in held:
            assert server.arrived.wait(WAIT_S)
    finally:
        for server in held:
            server.release()
        cycle.join(WAIT_S)
    assert len(monitor.snapshot.hosts) == 4


# -- the address resolver --------------------------------------------------------------------


def test_the_resolver_decides_where_each_node_is_scraped(
    serve: Serve, cluster: Cluster, started: Any, caplog: pytest.LogCaptureFixture
) -> None:
    server = serve(memory(1 * GiB, 4 * GiB, 3 * GiB, 16 * GiB))
    # Ray advertises endpoints that do not answer from here; the resolver knows where they are.
    cluster.add("a" * 56, "gpu-1", dead_port())
    cluster.add("b" * 56, "gpu-2", dead_port())
    cluster.add("c" * 56, "gpu-3", dead_port())

    def resolve(node: RayNode) -> str | None:
        if node.hostname == "gpu-1":
            return f"http://127.0.0.1:{server.port}/metrics"
        if node.hostname == "gpu-2":
            return None  # not reachable from here: left out
        raise RuntimeError("resolver bug")

    caplog.set_level(logging.DEBUG, logger="rlmetrics")
    monitor, reader = started(resolver=resolve)
    assert set(host_points(reader)) == {(USED, "gpu-1"), (TOTAL, "gpu-1")}
    assert sorted(monitor.snapshot.failures) == [("gpu-2", "no endpoint"), ("gpu-3", "no endpoint")]
    assert any("address resolver raised" in r.getMessage() for r in caplog.records)


def test_without_a_resolver_the_advertised_address_is_scraped(
    serve: Serve, cluster: Cluster, started: Any
) -> None:
    server = serve(memory(1 * GiB, 4 * GiB, 3 * GiB, 16 * GiB))
    node = cluster.add("a" * 56, "gpu-1", server.port)  # advertised as 127.0.0.1
    assert metrics_url(RayNode.from_ray(node)) == server.url  # type: ignore[arg-type]
    _monitor, reader = started()
    assert host_points(reader)[(USED, "gpu-1")][0] == 3 * GiB
    assert server.requests == 1


# -- failures of the monitor itself ----------------------------------------------------------


def test_when_nodes_cannot_be_listed_no_host_is_reported(
    serve: Serve, cluster: Cluster, started: Any, caplog: pytest.LogCaptureFixture
) -> None:
    server = serve(memory(1 * GiB, 4 * GiB, 3 * GiB, 16 * GiB))
    cluster.add("a" * 56, "gpu-1", server.port)
    monitor, reader = started()
    assert len(host_points(reader)) == 2

    def unreachable_gcs() -> list[dict[str, Any]]:
        raise ConnectionError("GCS unreachable")

    monitor.nodes = unreachable_gcs
    caplog.set_level(logging.WARNING, logger="rlmetrics")
    monitor.refresh()
    assert host_points(reader) == {}
    assert any("listing the Ray nodes failed" in r.getMessage() for r in caplog.records)


def test_a_stale_snapshot_is_not_reported(serve: Serve, cluster: Cluster) -> None:
    server = serve(memory(1 * GiB, 4 * GiB, 3 * GiB, 16 * GiB))
    cluster.add("a" * 56, "gpu-1", server.port)
    monitor = HostMemoryMonitor(nodes=cluster, max_age_s=0.2, worker_groups=WorkerGroups())
    monitor.refresh()
    assert [value for value, _ in monitor.used()] == [3 * GiB]
    # The monitor stalls (no cycle completes): past max_age its figures are not reported.
    wait_until(lambda: not monitor.used() and not monitor.total(), what="the snapshot to age")
    assert monitor.snapshot.hosts  # still there, just not reported


def test_each_cause_is_reported_once_per_cycle_with_a_count(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    for index in range(3):
        cluster.add(str(index) * 56, f"gpu-{index}", dead_port())
    monitor = HostMemoryMonitor(nodes=cluster, worker_groups=WorkerGroups())
    caplog.set_level(logging.DEBUG, logger="rlmetrics")
    monitor.refresh()
    monitor.refresh()
    reports = [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert [r.levelno for r in reports] == [logging.WARNING, logging.DEBUG]
    assert "and 2 more" in reports[0].getMessage()
    assert "gap, not the last value" in reports[0].getMessage()


# -- the thread ------------------------------------------------------------------------------


def test_the_thread_cycles_on_its_timer(serve: Serve, cluster: Cluster) -> None:
    server = serve(memory(1 * GiB, 4 * GiB, 3 * GiB, 16 * GiB))
    cluster.add("a" * 56, "gpu-1", server.port)
    monitor = HostMemoryMonitor(nodes=cluster, interval_s=0.05, worker_groups=WorkerGroups())
    monitor.start()
    try:
        assert monitor.wait_for_cycles(3, WAIT_S)
        assert server.requests >= 3
    finally:
        monitor.stop()
    assert not monitor.running


def test_stop_cancels_a_cycle_stuck_on_a_dead_node(cluster: Cluster, black_hole: BlackHole) -> None:
    cluster.add("a" * 56, "gpu-1", black_hole.port)
    monitor = HostMemoryMonitor(nodes=cluster, timeout_s=3600.0, worker_groups=WorkerGroups())
    monitor.start()
    assert black_hole.connected.wait(WAIT_S)
    monitor.stop(timeout_s=WAIT_S)
    assert not monitor.running  # it did not wait out the hour-long timeout
    assert monitor.cycles == 0


@pytest.mark.parametrize(
    "bad",
    [{"interval_s": 0}, {"timeout_s": -1.0}, {"timeout_s": float("nan")}, {"max_concurrency": 0}],
)
def test_a_monitor_that_cannot_work_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        HostMemoryMonitor(**bad)


@pytest.fixture(autouse=True)
def _no_thread_left() -> Iterator[None]:
    before = {t.ident for t in threading.enumerate()}
    yield
    wait_until(
        lambda: (
            not [
                t
                for t in threading.enumerate()
                if t.ident not in before and t.name == "rlmetrics-ray-host-memory"
            ]
        ),
        what="the monitor thread to end",
    )


byte_counts = st.one_of(st.none(), st.floats(min_value=0, max_value=2**60))
host_memories = st.lists(
    st.builds(
        HostMemory,
        st.text(min_size=1, max_size=8),
        byte_counts,
        byte_counts,
        st.sampled_from(["host", "cgroup"]),
        st.sampled_from(["none", "lm_policy", "lm_policy,vllm_policy"]),
    ),
    max_size=10,
    unique_by=lambda host: host.host_name,
)


@settings(max_examples=100)
@given(host_memories)
def test_a_snapshot_observes_each_value_a_host_has_once(hosts: list[HostMemory]) -> None:
    snapshot = build_snapshot(hosts, taken_at=0.0)
    assert [(value, dict(found)) for value, found in snapshot.used] == [
        (h.used, attributes(h.host_name, h.worker_groups, h.source))
        for h in hosts
        if h.used is not None
    ]
    assert [(value, dict(found)) for value, found in snapshot.total] == [
        (h.total, attributes(h.host_name, h.worker_groups, h.source))
        for h in hosts
        if h.total is not None
    ]
    # One attribute set per host, the same object in every snapshot: the collection's check
    # finds it by identity.
    again = build_snapshot(hosts, taken_at=1.0)
    assert all(a[1] is b[1] for a, b in zip(snapshot.used, again.used, strict=True))


# -- once per host -----------------------------------------------------------------------------


def test_a_monitor_not_elected_scrapes_and_exports_nothing_until_it_is(
    serve: Serve, cluster: Cluster, started: Any, tmp_path: Any
) -> None:
    from rlmetrics_ray.election import HostElection

    server = serve(memory(1 * GiB, 4 * GiB, 3 * GiB, 16 * GiB))
    cluster.add("a" * 56, "gpu-1", server.port)
    monitor, reader = started(lock_dir=str(tmp_path))
    assert monitor.elected and host_points(reader)
    # Another process of the run holds this host's lock (here: another election on the file).
    monitor.stop()
    election = monitor.election
    assert isinstance(election, HostElection) and election.path.parent == tmp_path
    holder = HostElection("another", tmp_path)
    holder.path = election.path  # the same host and run's lock, held by "another process"
    assert holder()
    requests = server.requests
    snapshot = monitor.refresh()
    assert (snapshot.hosts, monitor.elected, host_points(reader)) == ((), False, {})
    assert server.requests == requests  # nothing scraped
    holder.release()
    monitor.refresh()
    assert monitor.elected and host_points(reader)
