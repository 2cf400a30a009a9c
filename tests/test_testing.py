"""rlmetrics.testing's peers (a metrics endpoint, a black hole), read back over real sockets,
and its bounded wait; an OTLP receiver fed by the real exporter; the state isolation every
test runs in, the hypothesis profile every test folder loads, and the capture of what
rlmetrics said apart from what the libraries around it said."""

from __future__ import annotations

import logging
import signal
import socket
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import rlmetrics
from rlmetrics import _process_state, _waiting, testing
from rlmetrics.testing import (
    HYPOTHESIS_PROFILE_ENV,
    BlackHole,
    ExpositionServer,
    OtlpReceiver,
    captured_log,
    in_memory_telemetry,
    in_memory_tracing,
    isolated_state,
    load_hypothesis_profile,
    main_thread_blocked_in,
    own_records,
    points,
    reset_process_state,
    run_to_exit,
    single,
    span_records,
    wait_until,
)

ROOT = Path(__file__).resolve().parents[1]


def _get(url: str) -> tuple[int, str, str]:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return answer.status, answer.headers["Content-Type"], answer.read().decode()


def test_each_request_gets_what_render_returns_then() -> None:
    texts = iter(["a_total 1\n", "a_total 2\n"])
    with ExpositionServer(lambda: next(texts)) as server:
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"
        first, second = _get(server.url), _get(server.url)
    assert first == (200, "text/plain; version=0.0.4; charset=utf-8", "a_total 1\n")
    assert second[2] == "a_total 2\n"


def test_a_render_that_raises_answers_500() -> None:
    def failing() -> str:
        raise RuntimeError("agent failed")

    with ExpositionServer(failing) as server, pytest.raises(urllib.error.HTTPError) as error:
        _get(server.url)
    assert error.value.code == 500


def test_it_listens_on_loopback_only_and_closes() -> None:
    server = ExpositionServer(lambda: "")
    assert server.server.socket.getsockname()[0] == "127.0.0.1"
    server.close()
    with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
        probe.connect(("127.0.0.1", server.port))


def test_a_black_hole_accepts_and_never_answers() -> None:
    with BlackHole() as hole, socket.create_connection(("127.0.0.1", hole.port), 5) as client:
        assert hole.endpoint == f"http://127.0.0.1:{hole.port}"
        assert hole.connected.wait(5)
        client.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        client.settimeout(0.3)
        with pytest.raises(TimeoutError):
            client.recv(1)


def test_wait_until_returns_the_first_truthy_result() -> None:
    answers = iter([None, 0, [], "ready"])
    assert wait_until(lambda: next(answers), 5, "an answer") == "ready"


def test_wait_until_fails_naming_what_it_waited_for() -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0\.1 s waiting for the moon"):
        wait_until(lambda: False, 0.1, "the moon")


def test_the_otlp_receiver_keeps_each_resource_with_its_metric_names() -> None:
    pytest.importorskip("grpc", reason="the OTLP receiver needs grpcio")
    rlmetrics.declare(
        "testing-peers", [rlmetrics.MetricSpec("rl.test.depth", rlmetrics.Kind.GAUGE, key="depth")]
    )
    receiver = OtlpReceiver().start()
    try:
        with rlmetrics.start(
            "peers-test",
            run_id="run-peers",
            exporters=("otlp",),
            otlp_endpoint=receiver.endpoint,
            export_interval_s=3600,
        ):
            rlmetrics.record("testing-peers", {"depth": 3.0})
        # shutdown() exported once: the receiver holds that request.
        ((resource, names),) = receiver.wait_for(lambda r: r.resources(), 5, "the export")
        assert resource["service.name"] == "peers-test"
        assert resource["rlmetrics.run.id"] == "run-peers"
        assert "rl.test.depth" in names
        assert receiver.find("rl.test.depth").value == 3.0  # type: ignore[union-attr]
    finally:
        receiver.close()
    assert not receiver.running


def test_isolated_state_keeps_the_registry_record_is_bound_to() -> None:
    """``rlmetrics.record`` is a method bound to the default registry, so a test's own state
    must be swapped into that object and back out, never put in a new one."""
    outer = rlmetrics.default_registry()
    before = outer.declared()
    with isolated_state(rlmetrics.MetricRegistry()) as registry:
        assert registry is outer and rlmetrics.record.__self__ is outer  # type: ignore[attr-defined]
        rlmetrics.declare("t", [rlmetrics.MetricSpec("t.inside", rlmetrics.Kind.GAUGE, key="g")])
        with in_memory_telemetry() as (_handle, reader):
            rlmetrics.record("t", {"g": 2.0})
            assert single(points(reader), "t.inside").value == 2.0
        assert [item.spec.name for item in registry.declared()] == ["t.inside"]
    assert outer.declared() == before


# -- process state -------------------------------------------------------------------------------


@pytest.fixture
def registered_resets() -> Iterator[None]:
    """The resets a test registers are forgotten after it (the list is process state too)."""
    saved = dict(_process_state._resets)
    try:
        yield
    finally:
        _process_state._resets.clear()
        _process_state._resets.update(saved)


@pytest.mark.usefixtures("registered_resets")
def test_the_outermost_isolated_state_resets_process_state_when_it_starts_and_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between tests, not inside one: a nested isolated_state() leaves the process state the
    test chose before it alone."""
    monkeypatch.setattr(testing, "_depth", [])  # as if no test's isolated_state were running
    calls: list[str] = []

    @rlmetrics.resets_process_state
    def forget() -> None:
        calls.append("reset")

    with isolated_state():
        calls.append("test")
        with isolated_state():
            calls.append("nested")
        calls.append("test")
    assert calls == ["reset", "test", "nested", "test", "reset"]


@pytest.mark.usefixtures("registered_resets")
def test_a_reset_that_raises_is_raised_after_every_other_reset_ran() -> None:
    ran: list[str] = []

    @rlmetrics.resets_process_state
    def broken() -> None:
        raise RuntimeError("a broken reset")

    @rlmetrics.resets_process_state
    def after() -> None:
        ran.append("after")

    with pytest.raises(RuntimeError, match="a broken reset"):
        reset_process_state()
    assert ran == ["after"]


@pytest.mark.usefixtures("registered_resets")
def test_a_module_registering_again_replaces_its_reset() -> None:
    ran: list[int] = []

    def make(number: int) -> None:
        def forget() -> None:
            ran.append(number)

        rlmetrics.resets_process_state(forget)  # the same module and name, as a reload makes

    make(1)
    make(2)
    reset_process_state()
    assert ran == [2]


def test_a_span_a_test_entered_and_never_left_is_not_the_next_tests_parent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A step the loop died inside stays the calling thread's current span; the next test's
    run would start under it (found by a random order: test_tracing's umbrella test after its
    open-at-shutdown test)."""
    from opentelemetry import trace

    monkeypatch.setattr(testing, "_depth", [])  # as if no test's isolated_state were running
    with isolated_state(), in_memory_tracing() as (_handle, _reader, _spans):  # the earlier test
        rlmetrics.step(1).__enter__()  # never left
        assert trace.get_current_span().get_span_context().is_valid
    with isolated_state(), in_memory_tracing() as (_handle, _reader, spans):  # the next test
        assert not trace.get_current_span().get_span_context().is_valid
        with rlmetrics.run():
            pass
        [run] = span_records(spans)
    assert run.parent_id is None


# -- the hypothesis profile ---------------------------------------------------------------------


def test_the_suite_profile_never_fails_a_property_on_time() -> None:
    """Loaded by this folder's conftest: no deadline, and the health check about slow data
    generation off, so a busy machine cannot turn a property red."""
    current = settings()
    assert current.deadline is None
    assert HealthCheck.too_slow in current.suppress_health_check
    assert current.max_examples == settings.get_profile("suite").max_examples


def test_the_profile_is_chosen_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        monkeypatch.setenv(HYPOTHESIS_PROFILE_ENV, "fuzz")
        assert load_hypothesis_profile() == "fuzz"
        assert (settings().max_examples, settings().deadline) == (100_000, None)
        monkeypatch.setenv(HYPOTHESIS_PROFILE_ENV, "no-such-profile")
        with pytest.raises(ValueError, match="'no-such-profile' names no hypothesis profile"):
            load_hypothesis_profile()
    finally:
        monkeypatch.delenv(HYPOTHESIS_PROFILE_ENV)
        assert load_hypothesis_profile() == "suite"


def test_the_profile_without_hypothesis_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A plugin's conftest calls it at its top (docs/writing-a-plugin.md): before, a bare
    # "ModuleNotFoundError: No module named 'hypothesis'" from inside rlmetrics.testing.
    monkeypatch.setitem(sys.modules, "hypothesis", None)  # not installed
    with pytest.raises(ImportError, match=r"pip install hypothesis"):
        load_hypothesis_profile()


def test_every_test_folder_loads_the_profile() -> None:
    """A folder run on its own (``pytest plugins/rlmetrics-gym/tests``) reads only its own
    conftest: each must load the profile itself."""
    folders = [ROOT / "tests", *sorted((ROOT / "plugins").glob("*/tests"))]
    assert len(folders) > 1
    missing = [
        str(folder.relative_to(ROOT))
        for folder in folders
        if "\nload_hypothesis_profile()\n" not in (folder / "conftest.py").read_text()
    ]
    assert missing == []


# -- rlmetrics.testing.logs ---------------------------------------------------------------------


def test_own_records_are_rlmetrics_loggers_and_their_children_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG):
        for name in ("rlmetrics", "urllib3.connectionpool", "rlmetrics.providers", "rlmetricsx"):
            logging.getLogger(name).warning("from %s", name)
    assert [r.getMessage() for r in own_records(caplog.records)] == [
        "from rlmetrics",
        "from rlmetrics.providers",
    ]


def test_captured_log_takes_every_thread_and_level_and_restores_the_logger() -> None:
    logger = logging.getLogger("rlmetrics")
    before = logger.level
    with captured_log() as log:
        worker = threading.Thread(target=lambda: rlmetrics.warn_once("t", "from a thread"))
        worker.start()
        log.wait_for("from a thread")
        worker.join()
        logging.getLogger("rlmetrics.sub").debug("a debug line")
        logging.getLogger("urllib3").warning("not ours")
    assert [(r.levelno, r.getMessage()) for r in log.records] == [
        (logging.WARNING, "from a thread"),
        (logging.DEBUG, "a debug line"),
    ]
    assert log.matching("debug", logging.DEBUG) and not log.matching("debug", logging.WARNING)
    assert logger.level == before and not [
        h for h in logger.handlers if type(h).__module__ == "rlmetrics.testing.logs"
    ]


def test_a_wait_for_a_line_never_said_fails_naming_what_was_said() -> None:
    with captured_log() as log:
        logging.getLogger("rlmetrics").info("something else")
        with pytest.raises(AssertionError, match="waiting for 1 log records containing 'never'"):
            log.wait_for("never", timeout_s=0.05)


def test_main_thread_blocked_in_sees_the_wait_a_function_makes_and_no_other() -> None:
    """Seen from another thread while the main thread joins it through ``_waiting.join``: in
    that call, blocked in threading's wait; never in ``_waiting.wait``, which it did not call."""
    assert threading.current_thread() is threading.main_thread()
    elsewhere: list[bool] = []

    def look() -> None:
        wait_until(lambda: main_thread_blocked_in(_waiting.join), 30, "the main thread's join")
        elsewhere.append(main_thread_blocked_in(_waiting.wait))

    looking = threading.Thread(target=look)
    looking.start()
    assert _waiting.join(looking, 60)
    assert elsewhere == [False]


def test_a_hung_child_fails_saying_where_each_of_its_threads_waits() -> None:
    """A hung child was killed, and its test said only ``-9`` and an empty stderr."""
    script = (
        "import threading\n"
        "threading.Thread(target=threading.Event().wait, name='side', daemon=True).start()\n"
        "print('ready', flush=True)\n"
        "threading.Event().wait()\n"
    )
    status, err = run_to_exit(script, timeout_s=2.0)
    assert status == -signal.SIGABRT, err
    assert err.count("File ") >= 2 and "threading.py" in err and "<string>" in err, err
