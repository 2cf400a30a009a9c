"""Server and host memory from a real process tree with known allocations, sampled on the
sampler's own thread and read back from the in-memory reader."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from gym_support_server import wait_equal, wait_until
from gym_support_server_processes import MiB, process_tree
from hypothesis import given
from hypothesis import strategies as st
from rlmetrics_gym.memory import (
    HOST_AVAILABLE,
    HOST_PEAK,
    HOST_TOTAL,
    HOST_USAGE,
    MEMORY_TYPE_ATTR,
    PID_ATTR,
    SERVER_NAME_ATTR,
    SERVER_PEAK,
    SERVER_PROCESSES,
    SERVER_TYPE_ATTR,
    SERVER_USAGE,
    HostReading,
    MemorySampler,
    current_sampler,
    host_values,
    read_tree,
    start_memory_sampler,
    stop_memory_sampler,
)
from rlmetrics_gym.startup import stage_attributes

from rlmetrics.testing import points

INTERVAL_S = 0.05
ROOT_MIB = 24
CHILD_MIB = 40


@pytest.fixture
def stopped_after() -> Iterator[None]:
    """No sampler thread outlives the test."""
    try:
        yield
    finally:
        stop_memory_sampler()


def _server_values(reader: Any, server: str) -> dict[tuple[str, str], float]:
    """{(name, memory.type or ""): value} of one server's points."""
    return {
        (p.name, p.attributes.get(MEMORY_TYPE_ATTR, "")): float(p.value or 0)
        for p in points(reader)
        if p.attributes.get(SERVER_NAME_ATTR) == server
    }


def _host_values(reader: Any) -> dict[str, float]:
    return {
        p.name: float(p.value or 0) for p in points(reader) if p.name.startswith("gym.host.memory")
    }


def test_rss_and_pss_of_a_server_tree_with_its_descendants(
    telemetry: Any, stopped_after: None
) -> None:
    _, reader = telemetry
    with process_tree(ROOT_MIB, CHILD_MIB, children=2) as tree:
        sampler = start_memory_sampler(
            [("policy_model", "responses_api_models", tree.pid)], interval_s=INTERVAL_S, pss=True
        )
        wait_until(lambda: (SERVER_PROCESSES, "") in _server_values(reader, "policy_model"))
        values = _server_values(reader, "policy_model")
        allocated = (ROOT_MIB + 2 * CHILD_MIB) * MiB
        rss, pss = values[(SERVER_USAGE, "rss")], values[(SERVER_USAGE, "pss")]
        assert values[(SERVER_PROCESSES, "")] == 3  # the root and both children
        # Every allocated page is resident and private: counted in full by RSS and PSS.
        assert rss >= allocated and pss >= allocated
        assert pss <= rss  # shared interpreter pages are divided among the processes
        # The descendants are attributed: the tree holds more than the root alone can.
        assert rss - psutil.Process(tree.pid).memory_info().rss >= 2 * CHILD_MIB * MiB
        assert values[(SERVER_PEAK, "rss")] >= rss and values[(SERVER_PEAK, "pss")] >= pss
        point = next(p for p in points(reader) if p.name == SERVER_USAGE)
        assert point.unit == "By"
        assert point.attributes[SERVER_TYPE_ATTR] == "responses_api_models"
        assert point.attributes[PID_ATTR] == tree.pid  # an int, as the conventions type it

        # One child dies (left unreaped, a zombie): it is no longer attributed; the peak stays.
        tree.kill_child(tree.children[0])
        wait_equal(lambda: _server_values(reader, "policy_model")[(SERVER_PROCESSES, "")], 2)
        after = _server_values(reader, "policy_model")
        assert after[(SERVER_USAGE, "rss")] <= rss - (CHILD_MIB - 4) * MiB
        assert after[(SERVER_PEAK, "rss")] >= rss
        assert after[(SERVER_PEAK, "pss")] >= pss
        assert sampler.running
    # The root exited: the server's series end.
    wait_equal(lambda: _server_values(reader, "policy_model"), {})
    assert sampler.tracked() == []


def test_host_memory_is_total_minus_available(telemetry: Any, stopped_after: None) -> None:
    _, reader = telemetry
    start_memory_sampler(interval_s=INTERVAL_S)
    wait_until(lambda: HOST_PEAK in _host_values(reader))
    host = _host_values(reader)
    assert host[HOST_USAGE] + host[HOST_AVAILABLE] == host[HOST_TOTAL]
    assert host[HOST_TOTAL] == psutil.virtual_memory().total
    assert host[HOST_PEAK] >= host[HOST_USAGE]
    assert all(p.attributes == {} for p in points(reader) if p.name.startswith("gym.host."))


def test_rss_only_by_default_and_untracking_ends_the_series(
    telemetry: Any, stopped_after: None
) -> None:
    _, reader = telemetry
    sampler = start_memory_sampler(
        [("self", "resources_servers", os.getpid())], interval_s=INTERVAL_S, host=False
    )
    wait_until(lambda: (SERVER_USAGE, "rss") in _server_values(reader, "self"))
    assert (SERVER_USAGE, "pss") not in _server_values(reader, "self")
    assert not any(p.name.startswith("gym.host.") for p in points(reader))
    sampler.untrack("self")
    assert _server_values(reader, "self") == {}


def test_telemetry_shutdown_stops_the_sampler_thread(telemetry: Any) -> None:
    handle, reader = telemetry
    sampler = start_memory_sampler(interval_s=INTERVAL_S)
    assert current_sampler() is sampler and sampler.running
    wait_until(lambda: HOST_USAGE in _host_values(reader))
    handle.shutdown()
    assert not sampler.running
    assert current_sampler() is None
    assert not any(t.name == "rlmetrics-gym-memory" for t in threading.enumerate())


def test_a_second_start_replaces_the_sampler(telemetry: Any, stopped_after: None) -> None:
    first = start_memory_sampler(interval_s=INTERVAL_S)
    second = start_memory_sampler(interval_s=INTERVAL_S)
    assert not first.running and second.running and current_sampler() is second


def test_tracking_a_missing_process_is_reported_not_raised(
    telemetry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    sampler = MemorySampler(interval_s=INTERVAL_S)
    with process_tree(1, 1, children=0) as tree:
        pid = tree.pid
    sampler.track("gone", "resources_servers", pid)  # the tree was killed and reaped
    assert sampler.tracked() == []
    assert "could not be found" in caplog.text
    # A server that died before it was tracked is a condition, not a bug: one line naming the
    # server and its pid, no traceback (it carried psutil's NoSuchProcess traceback).
    (said,) = [r for r in caplog.records if "could not be found" in r.getMessage()]
    assert said.exc_info is None and "Traceback" not in caplog.text
    assert f"'gone' (pid {pid})" in said.getMessage()
    with pytest.raises(ValueError, match="interval_s"):
        MemorySampler(interval_s=0)


def test_read_tree_of_an_exited_root_is_none() -> None:
    with process_tree(1, 1, children=0) as tree:
        root = psutil.Process(tree.pid)
        assert read_tree(root, ["rss"]) is not None
    assert read_tree(root, ["rss", "pss"]) is None


@given(
    total=st.integers(min_value=0, max_value=1 << 50),
    used_fraction=st.floats(min_value=0, max_value=1),
    peak_extra=st.integers(min_value=0, max_value=1 << 40),
)
def test_host_values_mapping(total: int, used_fraction: float, peak_extra: int) -> None:
    available = int(total * (1 - used_fraction))
    peak = total - available + peak_extra
    values = host_values(HostReading(total=total, available=available), peak)
    assert values == {
        HOST_USAGE: total - available,
        HOST_AVAILABLE: available,
        HOST_TOTAL: total,
        HOST_PEAK: peak,
    }
    assert values[HOST_USAGE] + values[HOST_AVAILABLE] == values[HOST_TOTAL]


def test_tracking_a_name_again_with_a_new_root_retracts_the_old_roots_series(
    telemetry: Any,
) -> None:
    """A supervisor restarts a server under the same name: the old process's series end (a
    gauge would otherwise go on exporting its last value beside the new one's)."""
    _, reader = telemetry
    sampler = MemorySampler(interval_s=INTERVAL_S, host=False)  # sampled by hand, no thread
    with process_tree(1, 1, children=0) as old, process_tree(1, 1, children=0) as new:
        sampler.track("judge", "resources_servers", old.pid)
        sampler.sample()
        judge = [p for p in points(reader) if p.attributes.get(SERVER_NAME_ATTR) == "judge"]
        assert {p.attributes[PID_ATTR] for p in judge} == {old.pid}
        sampler.track("judge", "resources_servers", new.pid)  # before the old root exits
        assert [p for p in points(reader) if p.attributes.get(PID_ATTR) == old.pid] == []
        sampler.sample()
        found = [p for p in points(reader) if p.attributes.get(SERVER_NAME_ATTR) == "judge"]
    assert {p.attributes[PID_ATTR] for p in found} == {new.pid}
    assert {p.name for p in found} == {SERVER_USAGE, SERVER_PEAK, SERVER_PROCESSES}
    assert sampler.tracked() == ["judge"]


def test_server_names_and_types_are_bounded_as_the_startup_stages_bound_them(
    telemetry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The memory points and the startup stages carry the same nemo.gym.server.* attributes:
    a name outside the server-name template is "unknown", a type outside Gym's server types
    "other", in both; a name that is not even a string no longer costs the server its points."""
    _, reader = telemetry
    sampler = MemorySampler(interval_s=INTERVAL_S, host=False)
    sampler.track("policy model: the 8B one", "weird type", os.getpid())
    sampler.sample()
    sampler.track(None, 5, os.getpid())  # type: ignore[arg-type]
    sampler.sample()
    servers = {
        (p.attributes[SERVER_NAME_ATTR], p.attributes[SERVER_TYPE_ATTR])
        for p in points(reader)
        if p.name == SERVER_PROCESSES
    }
    assert servers == {("unknown", "other")}
    assert stage_attributes("init_server", "policy model: the 8B one", "weird type", False) == {
        **stage_attributes("init_server", "unknown", "other", False),  # type: ignore[dict-item]
    }
    assert "dropped a value" not in caplog.text


@pytest.mark.parametrize("pid", [None, "1234", 3.0, True, 0, -5])
def test_a_pid_that_is_no_process_id_is_refused_saying_what_to_pass(pid: Any) -> None:
    """None tracked the supervisor itself (psutil.Process(None) is the calling process) and
    then dropped every point on its None ``process.pid``; a pid read from a file ("1234"), a
    float or a bool raised psutil's internals' TypeError ("'<' not supported ...")."""
    sampler = MemorySampler(interval_s=INTERVAL_S)
    with pytest.raises((TypeError, ValueError), match="root process id"):
        sampler.track("math_with_judge", "resources_servers", pid)
    assert sampler.tracked() == []


@pytest.mark.parametrize("interval_s", [None, "5", float("inf"), True])
def test_a_sampling_interval_that_is_no_number_of_seconds_is_refused_saying_so(
    interval_s: Any,
) -> None:
    """None or "5" failed with Python's own "'>' not supported between instances of
    'NoneType' and 'int'", naming neither the argument nor what to pass."""
    with pytest.raises((TypeError, ValueError), match="interval_s must be positive"):
        MemorySampler(interval_s=interval_s)
