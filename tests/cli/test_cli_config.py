"""``rlmetrics config`` where the code chooses what the variables configure: an option variable
of an exporter or backend only a call chooses (``start(exporters=["prometheus"])``,
``Logger(backends=["console"])``) is what docs/configuration.md shows as the way to set it."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest

import rlmetrics


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(autouse=True)
def _no_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RLMETRICS_CONFIG", "RLMETRICS_EXPORTERS", "RLMETRICS_BACKENDS"):
        monkeypatch.delenv(name, raising=False)


def test_an_exporter_option_variable_for_the_call_s_exporter_is_shown_not_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Before: exit 2, 'RLMETRICS_EXPORTER_PROMETHEUS_PORT configures exporter 'prometheus',
    which is not chosen', for the documented RLMETRICS_EXPORTER_PROMETHEUS_PORT=9500 with
    start(exporters=["prometheus"]) — which start() takes: the check before a long job failed
    a configuration that works."""
    from rlmetrics.cli import main

    port = _free_port()
    monkeypatch.setenv("RLMETRICS_EXPORTER_PROMETHEUS_PORT", str(port))
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    assert "exporters: none configured (the call's, or the default)" in out
    assert (
        f"  prometheus.port = {port}  (RLMETRICS_EXPORTER_PROMETHEUS_PORT; "
        "only where the call chooses exporter 'prometheus', which start() otherwise refuses)"
    ) in out
    assert main(["config", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["exporters"] is None
    assert document["if_the_call_chooses"]["exporters"] == {
        "prometheus": {"port": {"value": port, "from": "RLMETRICS_EXPORTER_PROMETHEUS_PORT"}}
    }
    # ... and it is what start() does with the exporter the call chose.
    with rlmetrics.start(exporters=["prometheus"]) as handle:
        assert handle.prometheus_address == ("127.0.0.1", port)
    # Without the call's choice start() refuses it, as the line says.
    with pytest.raises(rlmetrics.ConfigurationError, match="not chosen"):
        rlmetrics.start()
    assert rlmetrics.current() is None


def test_a_backend_option_variable_beside_a_chosen_backend_is_shown_apart(
    monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from rlmetrics.cli import main

    monkeypatch.setenv("RLMETRICS_BACKENDS", "jsonl")
    monkeypatch.setenv("RLMETRICS_BACKEND_CONSOLE_MAX_KEYS", "3")
    assert main(["config", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["backends"] == {"from": "RLMETRICS_BACKENDS", "options": {"jsonl": {}}}
    assert document["if_the_call_chooses"]["backends"] == {
        "console": {"max_keys": {"value": 3, "from": "RLMETRICS_BACKEND_CONSOLE_MAX_KEYS"}}
    }


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("RLMETRICS_EXPORTER_PROMETHEUS_PROT", "9500", "has no option 'prot'"),
        ("RLMETRICS_EXPORTER_PROMETHEUS_PORT", "ninety", "'port' must be a port number"),
        ("RLMETRICS_EXPORTER_PROMETHEUSS_PORT", "9500", "names no exporter"),
    ],
)
def test_a_wrong_option_variable_of_the_call_s_exporter_is_still_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, variable: str, value: str, said: str
) -> None:
    from rlmetrics.cli import main

    monkeypatch.setenv(variable, value)
    assert main(["config"]) == 2
    err = capsys.readouterr().err
    assert said in err and variable in err
    with pytest.raises(rlmetrics.ConfigurationError, match=said):
        rlmetrics.start(exporters=["prometheus"])
    assert rlmetrics.current() is None


def test_the_loggers_run_id_is_the_files_telemetry_run_id_as_the_logger_takes_it(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Any
) -> None:
    """Before: 'logger.run_id = None  (default)' for a file that sets only [telemetry] run_id,
    while a Logger made before start() writes its rows under that id: the check before a long
    job showed another run id than the one the rows carry."""
    from rlmetrics.backends.jsonl import read_jsonl
    from rlmetrics.cli import main

    config = tmp_path / "rlmetrics.toml"
    config.write_text('[telemetry]\nrun_id = "job-1234"\nresume = true\n')
    monkeypatch.setenv("RLMETRICS_CONFIG", str(config))
    assert main(["config", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    shown = document["logger"]["run_id"]
    assert shown == {"value": "job-1234", "from": "rlmetrics.toml [telemetry] run_id"}
    assert document["logger"]["resume"]["value"] is True
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    assert "logger.run_id = 'job-1234'" in out, out
    # ... which is the id the Logger's rows carry.
    path = tmp_path / "m.jsonl"
    logger = rlmetrics.Logger({"jsonl": {"path": str(path)}})
    logger.log_metrics({"reward": 0.5}, step=1)
    logger.finish()
    assert {row["run_id"] for row in read_jsonl(path) if "run_id" in row} == {"job-1234"}

    # A [logger] run_id of its own still wins, in both.
    config.write_text('[telemetry]\nrun_id = "job-1234"\n[logger]\nrun_id = "mine"\n')
    assert main(["config", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["logger"]["run_id"]["value"] == "mine"
