"""The typed hook caller: tee implementations run only while telemetry is exporting, and a
hook that only tees implement is not even parsed for while it is off."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import rlmetrics
from rlmetrics.events import EfficiencySummary
from rlmetrics.plugins import register
from rlmetrics.testing import in_memory_telemetry, points


class _Both:
    def __init__(self) -> None:
        self.calls: list[str] = []

    @rlmetrics.hookimpl(tee=True)
    def log_metrics(self) -> None:
        self.calls.append("tee")


class _Plain:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    @rlmetrics.hookimpl
    def log_metrics(self) -> None:
        self.calls.append("plain")


def test_a_tee_implementation_runs_only_while_exporting() -> None:
    tee = _Both()
    register(tee, "tee")
    logger = rlmetrics.Logger(backends={})
    logger.log_metrics({"x": 1}, step=1)
    assert tee.calls == []
    with in_memory_telemetry():
        logger.log_metrics({"x": 1}, step=2)
    assert tee.calls == ["tee"]


def test_a_plain_implementation_runs_whether_or_not_telemetry_is_on() -> None:
    calls: list[str] = []
    register(_Plain(calls), "plain")
    rlmetrics.Logger(backends={}).log_metrics({"x": 1}, step=1)
    assert calls == ["plain"]


def test_a_hook_only_tees_implement_is_not_parsed_while_telemetry_is_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed: list[Any] = []
    # The route parses with in_metrics (from_metrics' form that answers None for a dict
    # with no efficiency/* key).
    real = EfficiencySummary.in_metrics.__func__  # type: ignore[attr-defined]

    def counting(cls: type[EfficiencySummary], metrics: Any) -> EfficiencySummary | None:
        parsed.append(dict(metrics))
        return real(cls, metrics)  # type: ignore[no-any-return]

    monkeypatch.setattr(EfficiencySummary, "in_metrics", classmethod(counting))
    logger = rlmetrics.Logger(backends={})
    logger.log_metrics({"efficiency/idle/validation_s": 1.0, "loss": 0.5}, step=1)
    assert parsed == []  # only the built-in efficiency family (a tee) implements the hook
    with in_memory_telemetry():
        logger.log_metrics({"efficiency/idle/validation_s": 1.0, "loss": 0.5}, step=2)
    # Parsed once, while exporting.
    assert parsed == [{"efficiency/idle/validation_s": 1.0, "loss": 0.5}]


def test_plain_implementations_run_in_pluggys_order_with_the_arguments_they_name() -> None:
    calls: list[tuple[str, tuple[Any, ...]]] = []

    class First:
        @rlmetrics.hookimpl(tryfirst=True)
        def log_metrics(self, prefix: str) -> None:
            calls.append(("first", (prefix,)))

    class Middle:
        @rlmetrics.hookimpl
        def log_metrics(self, step: int, metrics: Any) -> None:
            calls.append(("middle", (step, dict(metrics))))

    class Last:
        @rlmetrics.hookimpl(trylast=True)
        def log_metrics(self) -> None:
            calls.append(("last", ()))

    for plugin, name in ((Last(), "last"), (Middle(), "middle"), (First(), "first")):
        register(plugin, name)
    rlmetrics.Logger(backends={}).log_metrics({"x": 1}, step=7, prefix="val")
    expected = [("first", ("val",)), ("middle", (7, {"x": 1})), ("last", ())]
    assert calls == expected
    # pluggy's own caller, asked directly, agrees on order and arguments.
    calls.clear()
    rlmetrics.plugins.get_plugins().pm.hook.log_metrics(metrics={"x": 1}, step=7, prefix="val")
    assert calls == expected


def test_a_wrapper_registered_after_the_first_call_runs_on_the_next() -> None:
    order: list[str] = []

    class Plain:
        @rlmetrics.hookimpl
        def log_metrics(self) -> None:
            order.append("plain")

    class Wrapper:
        @rlmetrics.hookimpl(wrapper=True)
        def log_metrics(self) -> Any:
            order.append("before")
            result = yield
            order.append("after")
            return result

    register(Plain(), "plain")
    logger = rlmetrics.Logger(backends={})
    logger.log_metrics({"x": 1}, step=1)
    register(Wrapper(), "wrapper")
    logger.log_metrics({"x": 1}, step=2)
    assert order == ["plain", "before", "plain", "after"]


class _Reads:
    """A log_metrics implementation that declares what it reads, and one that does not."""

    def __init__(self) -> None:
        self.declared: list[tuple[str, dict[str, Any]]] = []
        self.undeclared: list[str] = []

    @rlmetrics.hookimpl(prefixes=["train", "acme-*"], keys=["acme/**"])
    def log_metrics(self, metrics: Any, prefix: str) -> None:
        self.declared.append((prefix, dict(metrics)))


class _ReadsAll:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    @rlmetrics.hookimpl
    def log_metrics(self, prefix: str) -> None:
        self.calls.append(prefix)


def test_a_declared_implementation_gets_only_the_dicts_it_reads() -> None:
    reads = _Reads()
    register(reads, "reads")
    register(_ReadsAll(reads.undeclared), "reads-all")
    logger = rlmetrics.Logger(backends={})
    logger.log_metrics({"acme/depth": 3, "loss": 1.0}, step=1, prefix="train")
    logger.log_metrics({"loss": 1.0}, step=2, prefix="train")  # none of its keys
    logger.log_metrics({"acme/depth": 4}, step=3, prefix="eval")  # not its prefix
    logger.log_metrics({"acme/depth": 5}, step=4, prefix="acme-a")
    logger.log_metrics({"acme/depth": 6, "loss": 1.0}, step=5, prefix="train")  # planned
    assert reads.declared == [
        ("train", {"acme/depth": 3, "loss": 1.0}),
        ("acme-a", {"acme/depth": 5}),
        ("train", {"acme/depth": 6, "loss": 1.0}),
    ]
    # An implementation that declares nothing gets every dict, as pluggy calls it.
    assert reads.undeclared == ["train", "train", "eval", "acme-a", "train"]


def test_a_plugin_registered_after_a_key_sequence_was_planned_gets_it() -> None:
    logger = rlmetrics.Logger(backends={})
    logger.log_metrics({"acme/depth": 1}, step=1, prefix="train")
    reads = _Reads()
    register(reads, "reads")
    logger.log_metrics({"acme/depth": 2}, step=2, prefix="train")
    assert reads.declared == [("train", {"acme/depth": 2})]


def test_a_raising_implementation_is_said_once_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[str] = []

    class Raises:
        @rlmetrics.hookimpl(tryfirst=True)
        def log_metrics(self) -> None:
            raise SystemExit(3)  # a plugin's exit must not end the training job

    register(Raises(), "raises")
    register(_ReadsAll(calls), "reads-all")
    logger = rlmetrics.Logger(backends={})
    logger.log_metrics({"x": 1}, step=1, prefix="train")
    logger.log_metrics({"x": 1}, step=2, prefix="train")
    assert calls == ["train", "train"]
    said = [r.getMessage() for r in caplog.records if "'raises'" in r.getMessage()]
    assert len(said) == 1 and "log_metrics" in said[0]


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"prefixes": "train"}, "takes a list of patterns"),
        ({"keys": []}, "non-empty list"),
        ({"keys": ["a/**"], "wrapper": True}, "only a plain log_metrics"),
    ],
)
def test_a_mistaken_declaration_fails_at_once_saying_what_to_change(
    options: dict[str, Any], said: str
) -> None:
    with pytest.raises(TypeError, match=said):

        @rlmetrics.hookimpl(**options)
        def log_metrics() -> None:
            pass


def test_only_log_metrics_declares_what_it_reads() -> None:
    with pytest.raises(TypeError, match="on 'on_setup_timing'"):

        @rlmetrics.hookimpl(prefixes=["train"])
        def on_setup_timing() -> None:
            pass


def test_a_declaration_on_a_misspelt_log_metrics_names_the_hook_meant() -> None:
    """It advised dropping the arguments, for a name one letter off the hook that takes them."""
    with pytest.raises(TypeError, match=r"'log_metric' is no hook: did you mean 'log_metrics'\?"):

        @rlmetrics.hookimpl(prefixes=["train"])
        def log_metric() -> None:
            pass


def test_a_telemetry_stopping_that_never_returns_leaves_shutdown_bounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A plugin joining a sampler stuck on I/O in ``telemetry_stopping`` held
    ``shutdown(timeout_s)`` (and the interpreter's exit) for as long as it hung. The hook is
    released only after shutdown returned: a shutdown that waited for it would not return."""
    release = threading.Event()
    entered = threading.Event()

    class Stuck:
        @rlmetrics.hookimpl
        def telemetry_stopping(self) -> None:
            entered.set()
            release.wait(120)

    register(Stuck(), "stuck")
    handle = rlmetrics.start(exporters=[], readers=[InMemoryMetricReader()])
    done = threading.Event()
    stopper = threading.Thread(target=lambda: (handle.shutdown(timeout_s=0.2), done.set()))
    with caplog.at_level("WARNING", logger="rlmetrics"):
        stopper.start()
        returned = done.wait(60)  # a bound for the suite, far above shutdown's own
        release.set()
        stopper.join(60)
    assert entered.is_set() and returned
    assert "'telemetry_stopping' of plugin 'stuck' did not return within" in caplog.text


def test_a_plugin_that_changes_the_logged_dict_changes_it_for_itself_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One ``log_metrics`` implementation popping ``reward`` (and writing text over ``loss``)
    took ``rl.reward.mean`` from every family after it and broke ``rl.policy.loss``: the
    implementations shared the loop's dict. They get a read-only view: the change raises in
    the plugin that tries it, reported naming it, and the others read what the loop logged."""

    class Greedy:
        @rlmetrics.hookimpl(tryfirst=True)
        def log_metrics(self, metrics: Any) -> None:
            metrics.pop("reward", None)

    register(Greedy(), "greedy")
    with caplog.at_level("WARNING", logger="rlmetrics"), in_memory_telemetry() as (_h, reader):
        logged = {"reward": 0.5, "loss": 1.0}
        rlmetrics.Logger(backends={}).log_metrics(logged, step=1, prefix="train")
        values = {p.name: p.value for p in points(reader)}
    assert (values["rl.reward.mean"], values["rl.policy.loss"]) == (0.5, 1.0)
    assert logged == {"reward": 0.5, "loss": 1.0}
    assert "plugin 'greedy' raised in hook 'log_metrics'" in caplog.text


_SIGNAL_IN_A_HOOK = """
import os, signal, sys
import rlmetrics
from rlmetrics.plugins import register

how = sys.argv[1]

class Plugin:
    @rlmetrics.hookimpl
    def log_metrics(self, metrics, step, prefix):
        if step == 2:
            if how == "signal":  # the scheduler's SIGTERM, handled while this hook runs
                os.kill(os.getpid(), signal.SIGTERM)
            else:  # the plugin's own sys.exit: its failure, not the job's end
                sys.exit(7)

register(Plugin(), "signalled")
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
logger = rlmetrics.Logger(backends={})
for step in range(5):
    logger.log_metrics({"loss": 1.0}, step=step)
print("loop ended", file=sys.stderr)
"""


@pytest.mark.parametrize(("how", "status"), [("signal", 143), ("plugin", 0)])
def test_a_signal_handlers_exit_inside_a_hook_ends_the_job(how: str, status: int) -> None:
    """A SIGTERM handler's ``sys.exit`` raised while a plugin's hook runs on the loop's thread
    ends the job (its guard took it for the plugin's and training went on: 8 of 10 SIGTERMs
    ignored); a plugin's own ``sys.exit`` is still its failure, reported, and the loop goes on."""
    from rlmetrics.testing import run_to_exit

    code, err = run_to_exit(_SIGNAL_IN_A_HOOK, (how,), timeout_s=60)
    assert code == status, err
    assert ("loop ended" in err) == (how == "plugin"), err
