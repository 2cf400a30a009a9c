"""The precedence matrix (issue 32): every setting docs/configuration.md lists, tried from each
source its row names — the call, the environment variable, the configuration file, nothing —
each winning over the ones below it, and a call giving the default value winning too (an
argument left out is "not given"; one given is never mistaken for the default).

The settings come from the docs' table itself, so a new row cannot skip the matrix: a row
needs a probe here, or a line saying which test covers it (a plugin's own settings)."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import rlmetrics
from rlmetrics._warn import strict_mode

DOCS = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
HEADER = "| Setting | Call | Environment variable | File | Default |"


@attrs.frozen
class Row:
    setting: str
    call: bool
    variable: bool
    file: bool


def documented_rows() -> list[Row]:
    """The rows of the settings table, each with the sources it lists (``—``: none)."""
    lines = DOCS.read_text().splitlines()
    start = lines.index(HEADER) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        assert len(cells) == 5, f"a settings row of five cells: {line}"
        rows.append(Row(cells[0], cells[1] != "—", cells[2] != "—", cells[3] != "—"))
    return rows


def _toml(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, bool) else str(value).lower()


def _health(handle: rlmetrics.Telemetry) -> Any:
    host, port = handle.prometheus_address or ("", 0)
    with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=10) as answer:
        return json.loads(answer.read())["stall_after_s"]


def _pushed(handle: rlmetrics.Telemetry, name: str) -> Any:
    from rlmetrics.exporters import push_exporter

    return push_exporter(handle.exporters[name].reader)


@attrs.frozen
class Probe:
    """How to give one setting from each source and read back what was used.

    ``values`` holds the default, file, env and call values, each differing from the one
    below it; ``default`` may be a predicate (a generated id)."""

    target: str  # "start" or "logger"
    values: dict[str, Any]
    read: Callable[[Any], Any]
    call: Callable[[Any], dict[str, Any]] | None = None
    env: Callable[[Any], dict[str, str]] | None = None
    file: Callable[[Any], str] | None = None
    base_file: str = ""
    base_call: dict[str, Any] = attrs.Factory(dict)
    #: Whether the call can give the default's value (an empty exporter choice is none).
    default_given: bool = True


def _prometheus_stall(env: Callable[[Any], dict[str, str]]) -> Probe:
    return Probe(
        "start",
        {"default": 600, "file": 33, "env": 22, "call": 11},
        _health,
        call=lambda v: {"exporters": {"prometheus": {"stall_after_s": v}}},
        env=env,
        file=lambda v: f"stall_after_s = {v}\n",
        base_file="[exporters.prometheus]\nport = 0\n",
    )


def _in_process_span_processor() -> dict[str, Any]:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    return {"span_processors": [SimpleSpanProcessor(InMemorySpanExporter())]}


def _strict(target: str, table: str) -> Probe:
    return Probe(
        target,
        {"default": False, "file": True, "env": False, "call": True},
        lambda _: strict_mode(),
        call=lambda v: {"strict": v},
        env=lambda v: {"RLMETRICS_STRICT": "1" if v else "0"},
        file=lambda v: f"[{table}]\nstrict = {_toml(v)}\n",
    )


PROBES: dict[str, list[Probe] | str] = {
    "Service name (`service.name`)": [
        Probe(
            "start",
            {"default": "rlmetrics", "file": "file-svc", "env": "env-svc", "call": "call-svc"},
            lambda h: h.service_name,
            call=lambda v: {"service_name": v},
            env=lambda v: {"OTEL_SERVICE_NAME": v},
            file=lambda v: f"[telemetry]\nservice_name = {_toml(v)}\n",
        )
    ],
    "Run id (`rlmetrics.run.id`)": [
        Probe(
            "start",
            {
                "default": lambda v: re.fullmatch("[0-9a-f]{12}", v),
                "file": "f-run",
                "call": "c-run",
            },
            lambda h: h.run_id,
            call=lambda v: {"run_id": v},
            file=lambda v: f"[telemetry]\nrun_id = {_toml(v)}\n",
        )
    ],
    "Resume the run the id names": [
        Probe(
            "start",
            {"default": False, "file": True, "call": False},
            lambda h: h.resume,
            call=lambda v: {"resume": v},
            file=lambda v: f"[telemetry]\nrun_id = 'r-1'\nresume = {_toml(v)}\n",
        )
    ],
    "Other resource attributes": [
        Probe(
            "start",
            {"default": None, "file": "file", "env": "env", "call": "call"},
            lambda h: h.resource.get("team"),
            call=lambda v: {"resource": {"team": v}},
            env=lambda v: {"OTEL_RESOURCE_ATTRIBUTES": f"team={v}"},
            file=lambda v: f"[telemetry.resource]\nteam = {_toml(v)}\n",
        )
    ],
    "Service version": [
        Probe(
            "start",
            {"default": None, "file": "1.0", "call": "2.0"},
            lambda h: h.resource.get("service.version"),
            call=lambda v: {"service_version": v},
            file=lambda v: f"[telemetry]\nservice_version = {_toml(v)}\n",
        )
    ],
    "Exporters": [
        Probe(
            "start",
            {"default": [], "file": ["prometheus"], "env": ["console"], "call": ["otlp_file"]},
            lambda h: sorted(h.exporters),
            call=lambda v: {"exporters": v},
            env=lambda v: {"RLMETRICS_EXPORTERS": ",".join(v)},
            file=lambda v: "".join(f"[exporters.{n}]\n" for n in v) + "port = 0\n",
            default_given=False,  # start(exporters=[]) chooses none: the configured stand
        )
    ],
    "An exporter's option": [
        _prometheus_stall(lambda v: {"RLMETRICS_EXPORTER_PROMETHEUS_STALL_AFTER_S": str(v)})
    ],
    "Push export interval": [
        Probe(
            "start",
            {"default": 60.0, "file": 30.0, "env": 20.0, "call": 10.0},
            lambda h: h.exporters["console"].reader._export_interval_millis / 1000,
            call=lambda v: {"export_interval_s": v},
            env=lambda v: {"OTEL_METRIC_EXPORT_INTERVAL": str(int(v * 1000))},
            file=lambda v: f"[telemetry]\nexport_interval_s = {v}\n",
            base_call={"exporters": ["console"]},
        )
    ],
    "OTLP endpoint (metrics and spans)": [
        Probe(
            "start",
            {
                "default": "localhost:4317",
                "file": "127.0.0.1:3",
                "env": "127.0.0.1:2",
                "call": "127.0.0.1:1",
            },
            lambda h: _pushed(h, "otlp")._endpoint,
            call=lambda v: {"otlp_endpoint": f"http://{v}"},
            env=lambda v: {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{v}"},
            file=lambda v: f'endpoint = "http://{v}"\n',
            base_file="[exporters.otlp]\ntimeout_s = 0.5\n",
        )
    ],
    "OTLP protocol (gRPC or HTTP/protobuf)": "the SDK's own variables, read by the otlp "
    "exporter to choose its transport: tests/exporters/test_otlp_http.py",
    "OTLP histogram aggregation": "an exporter's option and the SDK's own variable, as the "
    "'An exporter's option' row: tests/exporters/test_exponential_histograms.py",
    "OTLP TLS": "follows the endpoint's scheme (the endpoint row above); the variables are the "
    "SDK's own: tests/exporters/test_otlp*.py",
    "OTLP export timeout (retries included)": [
        Probe(
            "start",
            {"default": 3.0, "file": 1.5, "env": 2.5, "call": 0.5},
            lambda h: _pushed(h, "otlp")._timeout,
            call=lambda v: {"exporters": {"otlp": {"timeout_s": v}}},
            env=lambda v: {"OTEL_EXPORTER_OTLP_TIMEOUT": str(v)},
            file=lambda v: f"timeout_s = {v}\n",
            base_file='[exporters.otlp]\nendpoint = "http://127.0.0.1:1"\n',
        )
    ],
    "Spans at all": [
        Probe(
            "start",
            {"default": True, "file": False, "env": True, "call": False},
            lambda h: h.tracing,
            call=lambda v: {"traces": v},
            env=lambda v: {"OTEL_TRACES_EXPORTER": "otlp" if v else "none"},
            file=lambda v: f"[telemetry]\ntraces = {_toml(v)}\n",
            base_call={"exporters": ["otlp_file"]},
        )
    ],
    "Further span processors (tests)": [
        Probe(
            "start",
            {"default": False, "call": True},
            lambda h: h.tracing,
            call=lambda v: _in_process_span_processor() if v else {"span_processors": []},
        )
    ],
    "Span batch interval": "the SDK's OTEL_BSP_* variables; start(export_interval_s=) and the "
    "file's export_interval_s set it with the push interval (the row above)",
    "Spans to a file (OTLP/JSON lines)": "an exporter's option, as the 'An exporter's option' "
    "row: tests/exporters/test_otlp_file.py",
    "Span sampling": "the SDK's own variables: tests/test_tracing.py",
    "The span a process's spans descend from": "tests/test_tracing.py (trace_env)",
    "Prometheus endpoint address": [
        Probe(
            "start",
            {"default": "127.0.0.1", "file": "127.0.0.2", "env": "127.0.0.3", "call": "127.0.0.4"},
            lambda h: h.prometheus_address[0],
            call=lambda v: {"prometheus_host": v},
            env=lambda v: {"OTEL_EXPORTER_PROMETHEUS_HOST": v},
            file=lambda v: f"host = {_toml(v)}\n",
            base_file="[exporters.prometheus]\nport = 0\n",
        )
    ],
    "Stall bound of the health path before 20 step intervals are known (`/health` answers 503 "
    "after this long without a new step; then `stall_factor` \u00d7 the median interval, at least "
    "`stall_min_s`: [operations](operations.md#is-the-run-alive-the-health-path))": [
        _prometheus_stall(lambda v: {"RLMETRICS_STALL_AFTER_S": str(v)})
    ],
    "Shutdown bound": "an argument of shutdown(), nothing configures it: tests/test_telemetry.py",
    "Third-party plugins to load (allow-list)": [
        Probe(
            "start",
            {"default": None, "file": ["otlp"], "env": ["prometheus"], "call": ["console"]},
            lambda h: h.settings["plugins"][0],
            call=lambda v: {"plugins": v},
            env=lambda v: {"RLMETRICS_PLUGINS": ",".join(v)},
            file=lambda v: f"[telemetry]\nplugins = {_toml(v)}\n",
        )
    ],
    "Plugins never to load (built-ins included)": [
        Probe(
            "start",
            {"default": [], "file": ["otlp"], "env": ["prometheus"], "call": ["otlp_file"]},
            lambda h: sorted({"otlp", "prometheus", "otlp_file"} - set(_offered())),
            call=lambda v: {"disable_plugins": v},
            env=lambda v: {"RLMETRICS_DISABLE_PLUGINS": ",".join(v)},
            file=lambda v: f"[telemetry]\ndisable_plugins = {_toml(v)}\n",
        )
    ],
    "Which distribution wins an entry-point name clash, or a backend/exporter/demo-part name two "
    "plugins register": "not a start()/Logger() setting: tests/test_plugins.py",
    "Strict mode": [_strict("start", "telemetry"), _strict("logger", "logger")],
    "Naming profile (the proposed RL conventions' names beside rlmetrics')": [
        Probe(
            "start",
            {
                "default": "rlmetrics",
                "file": "rl_proposal",
                "env": "rlmetrics",
                "call": "rl_proposal",
            },
            lambda h: h.naming,
            call=lambda v: {"naming": v},
            env=lambda v: {"RLMETRICS_NAMING": v},
            file=lambda v: f"[telemetry]\nnaming = {_toml(v)}\n",
        )
    ],
    "The configuration file": "the file itself: every File cell of this table, and "
    "tests/test_configuration_sources.py",
    "Logger backends": [
        Probe(
            "logger",
            {
                "default": ["jsonl"],
                "file": ["console"],
                "env": ["console", "jsonl"],
                "call": ["jsonl"],
            },
            lambda lg: sorted(lg.backends),
            call=lambda v: {"backends": {n: {} for n in v}},
            env=lambda v: {"RLMETRICS_BACKENDS": ",".join(v)},
            file=lambda v: "".join(f"[backends.{n}]\n" for n in v),
        )
    ],
    "A backend's option": [
        Probe(
            "logger",
            {"default": "rlmetrics.jsonl", "file": "f.jsonl", "env": "e.jsonl", "call": "c.jsonl"},
            lambda lg: str(lg.backends["jsonl"].path),
            call=lambda v: {"backends": {"jsonl": {"path": v}}},
            env=lambda v: {"RLMETRICS_BACKEND_JSONL_PATH": v},
            file=lambda v: f"[backends.jsonl]\npath = {_toml(v)}\n",
        )
    ],
    "Key map of the trainer's keys": [
        Probe(
            "logger",
            {"default": None, "file": "openrlhf", "env": "verl", "call": "trl"},
            lambda lg: None if lg._key_map is None else lg._key_map.key_map.name,
            call=lambda v: {"key_map": v},
            env=lambda v: {"RLMETRICS_KEY_MAP": v},
            file=lambda v: f"[logger]\nkey_map = {_toml(v)}\n",
        )
    ],
    "The Logger's run id": [
        Probe(
            "logger",
            {
                "default": lambda v: re.fullmatch("[0-9a-f]{12}", v),
                "file": "f-run",
                "call": "c-run",
            },
            lambda lg: lg.identity.run_id,
            call=lambda v: {"run_id": v},
            file=lambda v: f"[logger]\nrun_id = {_toml(v)}\n",
        )
    ],
    "The Logger resumes its run": [
        Probe(
            "logger",
            {"default": False, "file": True, "call": False},
            lambda lg: lg.identity.resume,
            call=lambda v: {"resume": v},
            file=lambda v: f"[logger]\nrun_id = 'r-1'\nresume = {_toml(v)}\n",
        )
    ],
    "Secrets redacted in hyperparameters, sample columns and span tags": [
        Probe(
            "logger",
            {"default": None, "file": ["my_pat"], "call": False},
            lambda lg: lg.settings["redact"][0],
            call=lambda v: {"redact": v},
            file=lambda v: f"[logger]\nredact = {v!r}\n".replace("'", '"'),
        )
    ],
    "Queue of a non-inline backend": [
        Probe(
            "logger",
            {"default": 10_000, "file": 1000, "call": 8},
            lambda lg: lg.settings["queue_size"][0],
            call=lambda v: {"queue_size": v},
            file=lambda v: f"[logger]\nqueue_size = {v}\n",
        )
    ],
    "`Logger.finish` bound": [
        Probe(
            "logger",
            {"default": 30.0, "file": 12.0, "call": 7.0},
            lambda lg: lg.finish_timeout_s,
            call=lambda v: {"finish_timeout_s": v},
            file=lambda v: f"[logger]\nfinish_timeout_s = {v}\n",
        )
    ],
    "Exit bound: how long the interpreter's exit waits for the queued backends of a Logger "
    "never finished": [
        Probe(
            "logger",
            {"default": 10.0, "file": 12.0, "call": 7.0},
            lambda lg: lg.exit_timeout_s,
            call=lambda v: {"exit_timeout_s": v},
            file=lambda v: f"[logger]\nexit_timeout_s = {v}\n",
        )
    ],
    "Sample rows per `log_samples` call": [
        Probe(
            "logger",
            {"default": 256, "file": 10, "call": 5},
            lambda lg: lg.max_sample_rows,
            call=lambda v: {"max_sample_rows": v},
            file=lambda v: f"[logger]\nmax_sample_rows = {v}\n",
        )
    ],
    "Text per sample cell": [
        Probe(
            "logger",
            {"default": 32_768, "file": 100, "call": 50},
            lambda lg: lg.max_cell_bytes,
            call=lambda v: {"max_cell_bytes": v},
            file=lambda v: f"[logger]\nmax_cell_bytes = {v}\n",
        )
    ],
    "Keys nothing knows (typos)": [
        Probe(
            "logger",
            {"default": "ignore", "file": "warn", "env": "error", "call": "warn"},
            lambda lg: (
                lg._unknown_mode
                if (lg._unknown is None) == (lg._unknown_mode == "ignore")
                else "inconsistent"
            ),
            call=lambda v: {"unknown_keys": v},
            env=lambda v: {"RLMETRICS_UNKNOWN_KEYS": v},
            file=lambda v: f"[logger]\nunknown_keys = {_toml(v)}\n",
        )
    ],
    "Host-memory monitor on/off (`rlmetrics-ray`)": "a plugin's setting: "
    "plugins/rlmetrics-ray/tests/test_ray_host_memory.py",
    "vLLM token usage names (`rlmetrics-vllm`)": "a plugin's setting: plugins/rlmetrics-vllm/tests",
    "GPUs from the host-memory scrape, NVML without Ray (`rlmetrics-ray`)": "a plugin's setting: "
    "plugins/rlmetrics-ray/tests",
    "Host-memory scrape interval (`rlmetrics-ray`)": "a plugin's setting: "
    "plugins/rlmetrics-ray/tests",
    "Host-memory scrape timeout (`rlmetrics-ray`)": "a plugin's setting: "
    "plugins/rlmetrics-ray/tests",
    "Per-worker resource detectors (Ray workers)": "set for the workers by rlmetrics_ray: "
    "plugins/rlmetrics-ray/tests",
    "OpenTelemetry at all": "the SDK's own variable, one source: "
    "tests/test_providers.py::test_otel_sdk_disabled_exports_nothing_and_says_so_once",
    "W&B offline": "W&B's own variable: plugins/rlmetrics-wandb/tests",
    "MLflow run": "MLflow's own variables: plugins/rlmetrics-mlflow/tests",
}


def _offered() -> list[str]:
    from rlmetrics.exporters import available_exporters

    return list(available_exporters())


#: Every variable a probe sets, cleared before each cell (and the ones that would interfere).
_VARIABLES = (
    "RLMETRICS_CONFIG",
    "SLURM_JOB_ID",
    "TORCHELASTIC_RUN_ID",
    "RLMETRICS_STRICT",
    "RLMETRICS_PLUGINS",
    "RLMETRICS_DISABLE_PLUGINS",
    "RLMETRICS_EXPORTERS",
    "RLMETRICS_BACKENDS",
    "RLMETRICS_KEY_MAP",
    "RLMETRICS_UNKNOWN_KEYS",
    "RLMETRICS_STALL_AFTER_S",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_METRIC_EXPORT_INTERVAL",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_EXPORTER_PROMETHEUS_HOST",
    "OTEL_EXPORTER_PROMETHEUS_PORT",
)


def _cells(probe: Probe) -> Iterator[tuple[str, dict[str, Any], dict[str, str], str, Any]]:
    """``(cell, call kwargs, variables, file text, expected)`` for each source, each cell with
    every source below it set too, so the one named must win over them."""
    values = probe.values
    file = probe.file(values["file"]) if probe.file and "file" in values else ""
    env = probe.env(values["env"]) if probe.env and "env" in values else {}
    yield "default", {}, {}, "", values["default"]
    if file:
        yield "file", {}, {}, file, values["file"]
    if env:
        yield "environment over the file", {}, env, file, values["env"]
    if probe.call is not None:
        yield (
            "call over the environment and the file",
            probe.call(values["call"]),
            env,
            file,
            values["call"],
        )
        concrete = values["default"] is not None and not callable(values["default"])
        if concrete and probe.default_given and (file or env):
            # The call giving the default's value still wins: "not given" is None, not it.
            below = probe.env(values["file"]) if probe.env and "file" in values else env
            yield (
                "call giving the default",
                probe.call(values["default"]),
                below,
                file,
                values["default"],
            )


ROWS = documented_rows()


def test_the_documented_table_is_read() -> None:
    assert len(ROWS) > 30 and ROWS[0].setting == "Service name (`service.name`)"
    assert not set(PROBES) - {row.setting for row in ROWS}, "a probe for a row the docs dropped"


@pytest.mark.parametrize("row", ROWS, ids=[row.setting[:40] for row in ROWS])
def test_every_documented_setting_follows_the_precedence(
    row: Row, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probes = PROBES.get(row.setting)
    assert probes is not None, (
        f"docs/configuration.md documents {row.setting!r}: add a probe for it to PROBES, or the "
        "test that covers it"
    )
    if isinstance(probes, str):
        return  # covered where the entry says
    monkeypatch.chdir(tmp_path)
    for probe in probes:
        # Each source the row documents is tried.
        assert row.call <= (probe.call is not None), f"{row.setting}: the call is not tried"
        assert row.variable <= (probe.env is not None), f"{row.setting}: the variable is not tried"
        assert row.file <= (probe.file is not None), f"{row.setting}: the file is not tried"
        for cell, call, env, file, expected in _cells(probe):
            for name in _VARIABLES:
                monkeypatch.delenv(name, raising=False)
            for name, value in env.items():
                monkeypatch.setenv(name, value)
            text = probe.base_file + file
            if text:
                (tmp_path / "rlmetrics.toml").write_text(text)
                monkeypatch.setenv("RLMETRICS_CONFIG", str(tmp_path / "rlmetrics.toml"))
            got = _run(probe, {**probe.base_call, **call})
            ok = expected(got) if callable(expected) else got == expected
            assert ok, f"{row.setting}, {cell}: got {got!r}, expected {expected!r}"


def _run(probe: Probe, call: dict[str, Any]) -> Any:
    if probe.target == "start":
        handle = rlmetrics.start(**call)
        try:
            return probe.read(handle)
        finally:
            handle._shutdown(2.0)
            handle._release_strict()
    logger = rlmetrics.Logger(**call)
    try:
        return probe.read(logger)
    finally:
        logger._finish(None)
        logger._release_strict()
