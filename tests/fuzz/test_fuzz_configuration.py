"""The configuration sources under hostile input (issue 32): a TOML file (``RLMETRICS_CONFIG``)
and ``RLMETRICS_*`` / ``OTEL_*`` variables, right and wrong names, right and wrong types.
``rlmetrics.start()`` and ``Logger()`` either start or raise the one documented exception,
``rlmetrics.ConfigurationError``, whose message names the source of the wrong value (or, when
the document turns strict mode on, :class:`~rlmetrics.StrictModeError` for what did not
happen); never another traceback (a wrong type reaching a socket or gRPC), never a hang.

The default run uses the ``suite`` hypothesis profile; ``tox -e fuzz`` the ``fuzz`` one.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

import rlmetrics
from rlmetrics import StrictModeError
from rlmetrics.configuration import LOGGER_SETTINGS, TELEMETRY_SETTINGS, ConfigurationError

_SCRATCH = Path(tempfile.mkdtemp(prefix="rlmetrics-fuzz-config-"))
_text = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=12)
#: A value of any TOML type: the wrong one for most settings.
_any = st.one_of(
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    _text,
    st.lists(st.one_of(_text, st.integers()), max_size=3),
)
#: Right values, kept on 127.0.0.1 and in a scratch folder (nothing leaves the machine).
_RIGHT: dict[str, Any] = {
    "endpoint": st.just("http://127.0.0.1:1"),
    "timeout_s": st.floats(0.05, 0.5),
    "host": st.just("127.0.0.1"),
    "port": st.just(0),
    "stall_after_s": st.floats(1, 1e6),
    "path": st.sampled_from(["fuzz.jsonl", "spans.jsonl"]).map(lambda n: str(_SCRATCH / n)),
    "service_name": _text,
    "run_id": st.from_regex(r"[a-z0-9-]{1,12}", fullmatch=True),
    "export_interval_s": st.floats(0.5, 100),
    "queue_size": st.integers(1, 100),
    "max_sample_rows": st.integers(1, 100),
    "max_cell_bytes": st.integers(1, 1000),
    "finish_timeout_s": st.floats(0, 5),
    "key_map": st.sampled_from(["trl", "verl", "trll"]),
    "resume": st.just(False),
    "traces": st.booleans(),
    "strict": st.just(False),
    "plugins": st.just(["otlp"]),
    "disable_plugins": st.sampled_from([[], ["console_exporter"], ["nonesuch"]]),
}
_EXPORTERS = {
    "otlp": ("endpoint", "timeout_s"),
    "prometheus": ("host", "port", "stall_after_s"),
    "otlp_file": ("path",),
    "console": (),
    "otlpp": ("endpoint",),
}
_BACKENDS = {"jsonl": ("path",), "console": ("stream", "max_keys"), "jsonn": ("path",)}


def _value(name: str) -> st.SearchStrategy[Any]:
    right = _RIGHT.get(name)
    return _any if right is None else st.one_of(right, right, _any)


def _options(names: tuple[str, ...]) -> st.SearchStrategy[dict[str, Any]]:
    keys = st.sampled_from((*names, "pth", "prot")) if names else st.just("pth")
    return st.dictionaries(keys, st.nothing(), max_size=3).flatmap(
        lambda chosen: st.fixed_dictionaries({k: _value(k) for k in chosen})
    )


def _table(settings: Mapping[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    keys = st.sampled_from([*settings, "servce_name", "queue"])
    return st.lists(keys, max_size=4, unique=True).flatmap(
        lambda chosen: st.fixed_dictionaries({k: _value(k) for k in chosen})
    )


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    document: dict[str, Any] = {}
    if draw(st.booleans()):
        document["telemetry"] = draw(_table(TELEMETRY_SETTINGS))
    if draw(st.booleans()):
        document["logger"] = draw(_table(LOGGER_SETTINGS))
    for table, offered in (("exporters", _EXPORTERS), ("backends", _BACKENDS)):
        names = draw(st.lists(st.sampled_from(sorted(offered)), max_size=2, unique=True))
        if names:
            document[table] = {n: draw(_options(offered[n])) for n in names}
    if draw(st.integers(0, 9)) == 0:
        document["telemtry"] = {}
    return document


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return (
            "nan"
            if value != value
            else ("inf" if value > 0 else "-inf")
            if abs(value) == float("inf")
            else repr(value)
        )
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def to_toml(document: Mapping[str, Any]) -> str:
    lines: list[str] = []
    for table, content in document.items():
        if table in ("exporters", "backends"):
            for name, options in content.items():
                lines.append(f"[{table}.{name}]")
                lines.extend(f"{k} = {_toml_value(v)}" for k, v in options.items())
        else:
            lines.append(f"[{table}]")
            lines.extend(f"{k} = {_toml_value(v)}" for k, v in content.items())
    return "\n".join(lines) + "\n"


_variables = st.fixed_dictionaries(
    {},
    optional={
        "RLMETRICS_EXPORTERS": st.sampled_from(
            ["prometheus", "otlp_file", "otlpp", "console,prometheus"]
        ),
        "RLMETRICS_EXPORTER_PROMETHEUS_PORT": st.sampled_from(
            ["0", "ninety", "-1", "70000", "1.5"]
        ),
        "RLMETRICS_EXPORTER_OTLP_TIMEOUT_S": st.sampled_from(["0.2", "soon", "-1", "true"]),
        "RLMETRICS_EXPORTER_PROMETHEUS_STALL_AFTER_S": st.sampled_from(["30", "soon", "0"]),
        "RLMETRICS_BACKENDS": st.sampled_from(["jsonl", "console", "jsonn"]),
        "RLMETRICS_BACKEND_JSONL_PTH": st.just("x.jsonl"),
        "RLMETRICS_BACKEND_CONSOLE_MAX_KEYS": st.sampled_from(["5", "many", "0"]),
        "RLMETRICS_KEY_MAP": st.sampled_from(["trl", "trll"]),
        "RLMETRICS_STRICT": st.sampled_from(["0", "", "maybe"]),
        "OTEL_SERVICE_NAME": st.sampled_from(["svc", ""]),
        "OTEL_TRACES_EXPORTER": st.sampled_from(["none", "otlp"]),
    },
)

#: Where a message says a configured value came from.
_SOURCES = ("RLMETRICS_", "OTEL_", "rlmetrics.toml")


#: Under every example, beneath what it sets: a Prometheus exporter the example names without
#: a port listens on a free one, not on the default 9464, which another process on this
#: machine may hold (a concurrent test run did: a PortTaken no configuration caused).
_BASELINE = {"OTEL_EXPORTER_PROMETHEUS_PORT": "0"}


@contextlib.contextmanager
def _environment(variables: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    try:
        for name in [n for n in os.environ if n.startswith(("RLMETRICS_", "OTEL_"))]:
            if name != "RLMETRICS_HYPOTHESIS_PROFILE":
                del os.environ[name]
        os.environ.update({**_BASELINE, **variables})
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _strict(document: Mapping[str, Any]) -> bool:
    """Whether ``document`` turns strict mode on (``strict = true`` in a table that has it)."""
    return any(
        isinstance(document.get(table), Mapping) and document[table].get("strict") is True
        for table in ("telemetry", "logger")
    )


def _start_and_log() -> None:
    handle = rlmetrics.start()
    try:
        # In the scratch folder: a Logger the document gives no path writes rlmetrics.jsonl
        # into the working folder, which was the checkout's.
        with contextlib.chdir(_SCRATCH), rlmetrics.Logger() as logger:
            logger.log_metrics({"loss": 0.5}, step=1, prefix="train")
    finally:
        handle.shutdown(timeout_s=2.0)


@settings(suppress_health_check=list(HealthCheck))
@given(documents(), _variables)
# Found at 10**5 examples: an empty run id from the file was taken by start() and refused by
# the first Logger, whose message named no source.
@example({"telemetry": {"resume": False, "run_id": ""}}, {})
# Found at 10**5 examples: strict mode asked for by the file, and an export to the default
# endpoint, where nothing listens: StrictModeError, as strict mode documents.
@example({"telemetry": {"strict": True}, "exporters": {"otlp": {}}}, {})
def test_a_configuration_starts_or_raises_one_error_naming_its_source(
    document: dict[str, Any], variables: dict[str, str]
) -> None:
    path = _SCRATCH / "rlmetrics.toml"
    path.write_text(to_toml(document))
    with _environment({**variables, "RLMETRICS_CONFIG": str(path)}):
        try:
            _start_and_log()
            event("started")
        except ConfigurationError as error:
            event("refused")
            message = str(error)
            assert any(source in message for source in _SOURCES), message
            assert error.__cause__ is None
        except StrictModeError:
            # What strict mode documents: something asked for did not happen (an export
            # failed), raised from the next call. Only when the document asked for it.
            event("strict")
            assert _strict(document), "StrictModeError without strict mode asked for"
        finally:
            handle = rlmetrics.current()
            if handle is not None:  # a failure above must not leave telemetry running
                handle.shutdown(timeout_s=1.0)
    assert rlmetrics.current() is None
