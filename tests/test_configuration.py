"""Configuration without code: exporters, backends and their options from a TOML file
(``RLMETRICS_CONFIG``) and environment variables, the call winning over the environment, the
environment over the file; every mistake found as the Python call's is (issue 25)."""

from __future__ import annotations

import io
import json
import textwrap
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rlmetrics
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.configuration import (
    TEXT,
    ConfigurationError,
    _env_value,
    check_options,
    configured,
    declare_options,
)


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``config(text)`` writes a configuration file and points RLMETRICS_CONFIG at it."""

    def write(text: str) -> Path:
        path = tmp_path / "rlmetrics.toml"
        path.write_text(textwrap.dedent(text))
        monkeypatch.setenv("RLMETRICS_CONFIG", str(path))
        return path

    return write


def _rows(path: Path) -> list[dict[str, Any]]:
    return [row["metrics"] for row in read_jsonl(path)]


def _scrape(handle: rlmetrics.Telemetry) -> str:
    host, port = handle.prometheus_address or ("", 0)
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def test_a_file_configures_telemetry_exporters_the_logger_and_backends(
    config: Any, tmp_path: Path
) -> None:
    config(
        f"""
        [telemetry]
        service_name = "from-the-file"
        run_id = "run-7"

        [exporters.prometheus]
        port = 0

        [logger]
        max_sample_rows = 2

        [backends.jsonl]
        path = "{tmp_path / "configured.jsonl"}"
        """
    )
    with rlmetrics.start() as handle:
        assert (handle.service_name, handle.run_id) == ("from-the-file", "run-7")
        with rlmetrics.Logger() as logger:
            logger.log_metrics({"reward": 0.5}, step=1, prefix="train")
            assert logger.max_sample_rows == 2
        assert "rl_reward_mean" in _scrape(handle)
    assert _rows(tmp_path / "configured.jsonl") == [{"reward": 0.5}]


def test_variables_configure_exporters_and_backends(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RLMETRICS_EXPORTERS", "prometheus")
    monkeypatch.setenv("RLMETRICS_EXPORTER_PROMETHEUS_PORT", "0")
    monkeypatch.setenv("RLMETRICS_EXPORTER_PROMETHEUS_STALL_AFTER_S", "30")
    monkeypatch.setenv("RLMETRICS_BACKENDS", "jsonl")
    monkeypatch.setenv("RLMETRICS_BACKEND_JSONL_PATH", str(tmp_path / "env.jsonl"))
    with rlmetrics.start() as handle, rlmetrics.Logger() as logger:
        logger.log_metrics({"loss": 0.25}, step=1, prefix="train")
        assert "rl_policy_loss" in _scrape(handle)
        host, port = handle.prometheus_address or ("", 0)
        with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=10) as health:
            assert json.loads(health.read())["stall_after_s"] == 30
    assert _rows(tmp_path / "env.jsonl") == [{"loss": 0.25}]


def test_the_call_wins_over_the_environment_which_wins_over_the_file(
    config: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config(
        f"""
        [backends.jsonl]
        path = "{tmp_path / "file.jsonl"}"

        [backends.console]
        """
    )
    monkeypatch.setenv("RLMETRICS_BACKEND_JSONL_PATH", str(tmp_path / "env.jsonl"))
    with rlmetrics.Logger() as logger:  # the file's choice, the variable's path
        assert sorted(logger.backends) == ["console", "jsonl"]
        logger.log_metrics({"x": 1.0}, step=1)
    assert _rows(tmp_path / "env.jsonl") == [{"x": 1.0}]
    monkeypatch.setenv("RLMETRICS_BACKENDS", "jsonl")
    with rlmetrics.Logger() as logger:  # the variable's choice
        assert list(logger.backends) == ["jsonl"]
    call = tmp_path / "call.jsonl"
    with rlmetrics.Logger(backends={"jsonl": {"path": call}}) as logger:  # the call's
        logger.log_metrics({"x": 2.0}, step=1)
    assert _rows(call) == [{"x": 2.0}]


def test_a_start_argument_wins_over_a_configured_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RLMETRICS_EXPORTERS", "prometheus")
    monkeypatch.setenv("RLMETRICS_EXPORTER_PROMETHEUS_PORT", "1")  # a port nobody may bind
    with rlmetrics.start(prometheus_port=0) as handle:
        assert handle.prometheus_address is not None and handle.prometheus_address[1] != 1


# -- one validation for the call, the file and the environment ------------------------------------


def test_a_misspelled_option_is_the_same_mistake_from_each_source(
    config: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    mistake = r"backend 'jsonl' has no option 'pth' \(did you mean 'path'\?\); its options: path"
    with pytest.raises(TypeError, match=mistake):
        rlmetrics.Logger(backends={"jsonl": {"pth": "m.jsonl"}})
    config("[backends.jsonl]\npth = 'm.jsonl'\n")
    with pytest.raises(
        TypeError, match=mistake + r" \(from rlmetrics.toml \[backends.jsonl\] pth\)"
    ):
        rlmetrics.Logger()
    monkeypatch.delenv("RLMETRICS_CONFIG")
    monkeypatch.setenv("RLMETRICS_BACKENDS", "jsonl")
    monkeypatch.setenv("RLMETRICS_BACKEND_JSONL_PTH", "m.jsonl")
    with pytest.raises(TypeError, match=mistake + r" \(from RLMETRICS_BACKEND_JSONL_PTH\)"):
        rlmetrics.Logger()
    exporter = r"exporter 'prometheus' has no option 'prot' \(did you mean 'port'\?\)"
    with pytest.raises(TypeError, match=exporter):
        rlmetrics.start(exporters={"prometheus": {"prot": 0}})
    monkeypatch.setenv("RLMETRICS_EXPORTERS", "prometheus")
    monkeypatch.setenv("RLMETRICS_EXPORTER_PROMETHEUS_PROT", "0")
    with pytest.raises(TypeError, match=exporter):
        rlmetrics.start()
    assert rlmetrics.current() is None


def test_an_unknown_name_is_the_same_mistake_from_each_source(
    config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match=r"unknown backend\(s\) \['jsonn'\]"):
        rlmetrics.Logger(backends={"jsonn": {}})
    config("[backends.jsonn]\n")
    with pytest.raises(ValueError, match=r"unknown backend\(s\) \['jsonn'\]"):
        rlmetrics.Logger()
    monkeypatch.delenv("RLMETRICS_CONFIG")
    monkeypatch.setenv("RLMETRICS_EXPORTERS", "otlpp")
    with pytest.raises(ValueError, match=r"unknown exporter\(s\) \['otlpp'\]"):
        rlmetrics.start()
    assert rlmetrics.current() is None


@pytest.mark.parametrize(
    ("variables", "mistake"),
    [
        (
            {"RLMETRICS_BACKEND_JSONN_PATH": "x"},
            "RLMETRICS_BACKEND_JSONN_PATH names no backend .*: RLMETRICS_BACKEND_<NAME>_<OPTION> "
            "takes one of",
        ),
        (
            {"RLMETRICS_BACKEND_CONSOLE_MAX_KEYS": "5"},
            "RLMETRICS_BACKEND_CONSOLE_MAX_KEYS configures backend 'console', which is not chosen",
        ),
        ({"RLMETRICS_CONFIG": "/nonexistent/rlmetrics.toml"}, "cannot read the configuration"),
    ],
)
def test_a_variable_that_does_nothing_is_a_mistake(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], mistake: str
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=mistake):
        rlmetrics.Logger()


@pytest.mark.parametrize(
    ("variable", "meant"),
    [
        ("RLMETRICS_BACKEND_JSON_PATH", "RLMETRICS_BACKEND_JSONL_PATH"),
        ("RLMETRICS_BACKEND_JSONN_PATH", "RLMETRICS_BACKEND_JSONL_PATH"),
        ("RLMETRICS_EXPORTER_PROMETHEUSS_PORT", "RLMETRICS_EXPORTER_PROMETHEUS_PORT"),
        ("RLMETRICS_EXPORTER_OTLPFILE_PATH", "RLMETRICS_EXPORTER_OTLP_FILE_PATH"),
    ],
)
def test_an_option_variable_with_a_misspelt_name_says_the_variable_meant(
    monkeypatch: pytest.MonkeyPatch, variable: str, meant: str
) -> None:
    # Before: "names no backend: ... takes one of CONSOLE, JSONL as NAME", the variable to
    # write left to the reader.
    monkeypatch.setenv(variable, "9")
    with pytest.raises(ValueError, match=rf"{variable} names no .*\(did you mean {meant}\?\)"):
        rlmetrics.Logger() if "BACKEND" in variable else rlmetrics.start()


def test_an_option_variable_configures_what_the_call_chooses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The code chooses the exporter or backend, the job's environment sets one option of it:
    # the variable applies (the call's own options still win), as a file table's would.
    monkeypatch.setenv("RLMETRICS_EXPORTER_PROMETHEUS_PORT", "0")
    monkeypatch.setenv("RLMETRICS_BACKEND_JSONL_PATH", str(tmp_path / "env.jsonl"))
    telemetry = rlmetrics.start(exporters=["prometheus"])
    try:
        address = telemetry.prometheus_address
        assert address is not None and address[1] != 9464  # 0 picked a free one
    finally:
        telemetry.shutdown(timeout_s=5)
    monkeypatch.setenv("RLMETRICS_BACKEND_CONSOLE_MAX_KEYS", "2")
    stream = io.StringIO()
    with rlmetrics.Logger(backends={"console": {"stream": stream}, "jsonl": {}}) as logger:
        logger.log_metrics({"a": 1, "b": 2, "c": 3}, step=1)
    assert "1 more" in stream.getvalue()
    assert (tmp_path / "env.jsonl").exists()
    with pytest.raises(ValueError, match="RLMETRICS_BACKEND_CONSOLE_MAX_KEYS configures backend"):
        rlmetrics.Logger(backends=["jsonl"])  # the call chose no console: it does nothing


def test_an_option_variable_s_text_is_taken_without_surrounding_blanks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A trailing blank an env file or a copied line left wrote "m.jsonl " (a file name that
    # looks like m.jsonl and is not found by that name), a leading one a folder " " in the
    # working directory; quoted TOML text keeps its blanks.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RLMETRICS_BACKEND_JSONL_PATH", f" {tmp_path / 'm.jsonl'} ")
    with rlmetrics.Logger() as logger:
        logger.log_metrics({"a": 1}, step=0)
    assert [p.name for p in tmp_path.iterdir()] == ["m.jsonl"]
    monkeypatch.setenv("RLMETRICS_BACKEND_JSONL_PATH", f'"{tmp_path / "q.jsonl"} "')
    with rlmetrics.Logger() as logger:
        logger.log_metrics({"a": 1}, step=0)
    assert (tmp_path / "q.jsonl ").exists()


def test_an_empty_option_variable_counts_as_unset(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # As OpenTelemetry reads its own (OTEL_EXPORTER_PROMETHEUS_PORT=) and RLMETRICS_EXPORTERS=:
    # an empty JSONL path skipped the default backend ("cannot append to ."), an empty port
    # failed start() as "got str ''".
    from rlmetrics.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RLMETRICS_BACKEND_JSONL_PATH", "")
    monkeypatch.setenv("RLMETRICS_EXPORTERS", "prometheus")
    monkeypatch.setenv("RLMETRICS_EXPORTER_PROMETHEUS_PORT", " ")
    assert main(["config"]) == 0
    monkeypatch.delenv("RLMETRICS_EXPORTERS")
    with rlmetrics.Logger() as logger:
        logger.log_metrics({"a": 1}, step=0)
    assert (tmp_path / "rlmetrics.jsonl").exists()


@pytest.mark.parametrize("tracker", ["wandb", "mlflow", "tensorboard", "swanlab", "trackio"])
def test_a_tracker_whose_distribution_is_missing_says_how_to_install_it(tracker: str) -> None:
    # Before: "install its distribution (for example rlmetrics-wandb)", whatever was asked.
    import importlib.metadata

    try:
        importlib.metadata.distribution(f"rlmetrics-{tracker}")
        pytest.skip(f"rlmetrics-{tracker} is installed here")
    except importlib.metadata.PackageNotFoundError:
        pass
    with pytest.raises(ValueError) as caught:
        rlmetrics.Logger(backends={tracker: {}})
    assert (
        f"unknown backend(s) ['{tracker}'] (its distribution rlmetrics-{tracker} is not "
        f"installed: pip install 'rlmetrics[{tracker}]', from a clone pip install "
        f"'.[{tracker}]' ./plugins/rlmetrics-{tracker})"
    ) in str(caught.value)


def test_names_run_together_say_how_a_list_is_written(monkeypatch: pytest.MonkeyPatch) -> None:
    # "jsonl console" is two backends written as one name: not "did you mean 'console'?",
    # which would drop the other.
    monkeypatch.setenv("RLMETRICS_BACKENDS", "jsonl console")
    with pytest.raises(ValueError, match=r"comma-separated: 'jsonl,console'") as caught:
        rlmetrics.Logger()
    assert "did you mean" not in str(caught.value)
    monkeypatch.delenv("RLMETRICS_BACKENDS")
    with pytest.raises(ValueError, match=r"one name each: \['otlp', 'prometheus'\]"):
        rlmetrics.start(exporters="otlp prometheus")


@pytest.mark.parametrize("given", ["otlp,prometheus", ["otlp,prometheus"], "otlp, prometheus"])
def test_names_a_call_gives_comma_separated_say_to_give_one_each(given: object) -> None:
    # As RLMETRICS_EXPORTERS=otlp,prometheus is written: not "did you mean 'prometheus'?",
    # which would drop otlp.
    with pytest.raises(ValueError, match=r"one name each: \['otlp', 'prometheus'\]") as caught:
        rlmetrics.start(exporters=given)
    assert "did you mean" not in str(caught.value)
    with pytest.raises(ValueError, match=r"one name each: \['jsonl', 'console'\]"):
        rlmetrics.Logger(backends="jsonl,console")


@pytest.mark.parametrize(
    ("text", "mistake"),
    [
        ("[telemtry]\n", r"no table \[telemtry\] \(did you mean 'telemetry'\?\)"),
        ("[telemetry]\nservice = 'x'\n", r"\[telemetry\] has no setting 'service'"),
        (
            "[telemetry]\nexport_interval_s = 'ten'\n",
            "export_interval_s must be a positive number, got str",
        ),
        ("[logger]\nqueue_size = true\n", "queue_size must be a positive integer, got bool"),
        ("[backends]\njsonl = 1\n", r"\[backends\] holds one table per backend"),
        ("[telemetry\n", "not valid TOML"),
    ],
)
def test_a_file_mistake_names_itself(config: Any, text: str, mistake: str) -> None:
    config(text)
    with pytest.raises(ValueError, match=mistake):
        rlmetrics.start()
    with pytest.raises(ValueError, match=mistake):
        rlmetrics.Logger()
    assert rlmetrics.current() is None


@pytest.mark.parametrize(
    ("text", "goes"),
    [
        # A start() / Logger() argument that the file spells as tables: before, "[telemetry]
        # has no setting 'exporters' (did you mean 'export_interval_s'?)".
        (
            "[telemetry]\nexporters = ['otlp', 'prometheus']\n",
            r"'exporters': an exporter is chosen by a table of its own: \[exporters\.otlp\] and "
            r"\[exporters\.prometheus\]",
        ),
        (
            "[logger]\nbackends = ['jsonl']\n",
            r"'backends': a backend is chosen by a table of its own: \[backends\.jsonl\]",
        ),
        (
            "exporters = ['prometheus']\n",
            r"\[exporters\] holds one table per exporter: \[exporters\.prometheus\],",
        ),
        ("[telemetry]\notlp_endpoint = 'x:4317'\n", r"it is \[exporters\.otlp\] endpoint"),
        ("[telemetry]\nprometheus_port = 9465\n", r"it is \[exporters\.prometheus\] port"),
        ("[telemetry]\nkey_map = 'trl'\n", r"'key_map': it is a \[logger\] setting"),
        ("[logger]\nservice_name = 'x'\n", r"'service_name': it is a \[telemetry\] setting"),
    ],
)
def test_a_setting_in_the_wrong_place_says_where_it_goes(config: Any, text: str, goes: str) -> None:
    config(text)
    for call in (rlmetrics.start, rlmetrics.Logger):
        with pytest.raises(ValueError, match=goes) as caught:
            call()
        assert "did you mean" not in str(caught.value)


def test_a_logger_made_before_start_runs_under_the_files_run_id(
    config: Any, tmp_path: Path
) -> None:
    # Before: the Logger generated an id of its own, so its JSONL rows and the telemetry
    # started next (under job-1234) named two runs, and nothing said so.
    config("[telemetry]\nrun_id = 'job-1234'\n")
    logger = rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}})
    with rlmetrics.start() as telemetry:
        logger.log_metrics({"reward": 0.5}, step=1)
        logger.finish()
    assert telemetry.run_id == "job-1234"
    assert [row["run_id"] for row in read_jsonl(tmp_path / "m.jsonl")] == ["job-1234"]
    # The call's id wins over the file's, and a Logger after start() takes the running one's.
    with rlmetrics.start(run_id="from-the-call"), rlmetrics.Logger(backends={}) as logger:
        assert logger.identity.run_id == "from-the-call"


def test_a_value_the_call_refuses_is_refused_from_the_file(config: Any) -> None:
    with pytest.raises(ValueError, match="export_interval_s must be a positive number"):
        rlmetrics.start(export_interval_s=-1)
    config("[telemetry]\nexport_interval_s = -1\n")
    with pytest.raises(ValueError, match="export_interval_s must be a positive number"):
        rlmetrics.start()


def test_strict_mode_from_the_file(config: Any) -> None:
    config("[logger]\nstrict = true\n\n[backends.jsonl]\npath = '/dev/null/x.jsonl'\n")
    with pytest.raises(rlmetrics.StrictModeError, match="backend 'jsonl'"):
        rlmetrics.Logger()


def test_where_each_value_came_from(config: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    config("[telemetry]\nservice_name = 'a'\n\n[exporters.otlp]\nendpoint = 'x:4317'\n")
    monkeypatch.setenv("RLMETRICS_EXPORTER_OTLP_TIMEOUT_S", "2.5")
    found = configured(exporter_names=["otlp", "prometheus"]).as_dict()
    assert found["telemetry"] == {
        "service_name": {"value": "a", "from": "rlmetrics.toml [telemetry] service_name"}
    }
    assert found["exporters"] == {
        "from": "rlmetrics.toml [exporters]",
        "options": {
            "otlp": {
                "endpoint": {"value": "x:4317", "from": "rlmetrics.toml [exporters.otlp] endpoint"},
                "timeout_s": {"value": 2.5, "from": "RLMETRICS_EXPORTER_OTLP_TIMEOUT_S"},
            }
        },
    }
    assert found["backends"] is None


@given(
    st.one_of(
        st.integers(-(2**63), 2**63 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        st.booleans(),
        st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=20),
    )
)
def test_a_variables_value_reads_as_toml_else_as_its_text(value: Any) -> None:
    if isinstance(value, str):
        parsed = _env_value(value)
        # Text that is no TOML value is the text itself without the blanks around it (2bbf2e5:
        # CI run 17 drew ' ', which read as ''); text that is one reads as it.
        assert (
            parsed == value.strip()
            or not isinstance(parsed, str)
            or value.strip().startswith(("'", '"'))
        )
    else:
        text = json.dumps(value) if not isinstance(value, bool) else str(value).lower()
        assert _env_value(text) == value


def test_the_config_command_shows_and_checks_it(
    config: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from rlmetrics.cli import main

    assert main(["config"]) == 0
    assert "nothing is configured" not in capsys.readouterr().out  # (backends: none configured)
    config("[telemetry]\nservice_name = 'a'\n\n[backends.jsonl]\npath = 'm.jsonl'\n")
    monkeypatch.setenv("RLMETRICS_BACKEND_JSONL_PATH", "runs/m.jsonl")
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    assert "telemetry.service_name = 'a'  (rlmetrics.toml [telemetry] service_name)" in out
    assert "jsonl.path = 'runs/m.jsonl'  (RLMETRICS_BACKEND_JSONL_PATH)" in out
    monkeypatch.setenv("RLMETRICS_BACKEND_JSONL_PTH", "x")
    assert main(["config"]) == 2
    assert "has no option 'pth'" in capsys.readouterr().err


@declare_options(url=TEXT, timeout_s=TEXT)
def _takes_what_it_declared(**options: Any) -> None:
    """A tracker's factory: it takes ``**options`` so the tracker is imported only when used."""


def _takes_anything(**options: Any) -> None:
    """A factory that declares nothing: its names cannot be checked."""


def test_a_factory_taking_any_keyword_takes_the_options_it_declared() -> None:
    with pytest.raises(
        ConfigurationError,
        match=r"backend 'acme' has no option 'ulr' \(did you mean 'url'\?\); its options: "
        r"url, timeout_s",
    ):
        check_options("backend", "acme", _takes_what_it_declared, {"ulr": "x"})
    given = {"url": "x", "timeout_s": "1"}
    assert check_options("backend", "acme", _takes_what_it_declared, given) == given
    assert check_options("backend", "acme", _takes_anything, {"ulr": 1}) == {"ulr": 1}


def test_options_given_as_a_bare_value_say_how_to_write_them() -> None:
    # Before: "backend 'jsonl': options are a mapping of option names to values, got a str".
    with pytest.raises(ConfigurationError, match=r"give \{'jsonl': \{'path': 'x\.jsonl'\}\}"):
        rlmetrics.Logger(backends={"jsonl": "x.jsonl"})
    with pytest.raises(
        ConfigurationError,
        match=r"its options: host, port, .* as \{'prometheus': \{option: value\}\}",
    ):
        rlmetrics.start(exporters={"prometheus": 9464})


def test_a_declared_option_the_factory_does_not_take_fails_where_it_is_declared() -> None:
    # Before: taken silently, so 'path' went unchecked (and 'pth' was refused from users).
    with pytest.raises(TypeError, match=r"'pth' is no option of Tsv \(did you mean 'path'\?\)"):

        @declare_options(pth=TEXT)
        class Tsv:
            def __init__(self, path: str = "acme.tsv") -> None: ...

    @declare_options(path=TEXT, url=TEXT)  # a factory taking **options takes what it declares
    def make(path: str = "x", **options: Any) -> None: ...


def test_an_option_declared_without_an_option_kind_fails_where_it_is_declared() -> None:
    # Before: taken, and the first Logger() that chose the backend raised AttributeError
    # ('str' object has no attribute 'checked_variables') out of rlmetrics.
    with pytest.raises(TypeError, match=r"option 'path' .* PATH, .* got str 'path'"):
        declare_options(path="path")  # type: ignore[arg-type]


def _sdk_takes_count(text: str) -> bool:
    """What the SDK's BatchSpanProcessor takes from a count variable: ``int()`` of the text,
    above 0 (anything else raises there, or logs a traceback and uses its default)."""
    try:
        return int(text) > 0
    except ValueError:
        return False


@given(
    st.one_of(
        st.integers(min_value=-(10**6), max_value=10**6).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.text(max_size=12),
    )
)
def test_check_variable_refuses_exactly_what_the_sdk_would_not_take(text: str) -> None:
    """A count variable's text: refused (naming the variable) iff the SDK would not take it
    as a count; never any other exception."""
    import os

    from rlmetrics.configuration import POSITIVE_INTEGER, ConfigurationError, check_variable

    name = "OTEL_BSP_MAX_QUEUE_SIZE"
    if "\x00" in text:
        return  # no environment variable holds a NUL
    saved = os.environ.get(name)
    os.environ[name] = text
    try:
        refused = False
        try:
            check_variable(name, POSITIVE_INTEGER, int)
        except ConfigurationError as error:
            refused = True
            assert str(error).startswith(f"{name}={text.strip()!r} must be a positive integer")
        assert refused == (bool(text.strip()) and not _sdk_takes_count(text.strip()))
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved
