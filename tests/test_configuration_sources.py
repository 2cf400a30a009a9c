"""Every configuration mistake names the source of the wrong value, options are type-checked
where they are read, the file is read only when it is a regular file of bounded size, and a
Python-API mistake is one exception with no chained internal traceback (issue 32)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rlmetrics
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.configuration import MAX_CONFIG_BYTES, ConfigurationError


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``config(text)`` writes a configuration file and points RLMETRICS_CONFIG at it."""

    def write(text: str) -> Path:
        path = tmp_path / "rlmetrics.toml"
        path.write_text(textwrap.dedent(text))
        monkeypatch.setenv("RLMETRICS_CONFIG", str(path))
        return path

    return write


def _raises(call: Any, *fragments: str) -> ConfigurationError:
    """The ConfigurationError ``call()`` raises, which says each of ``fragments`` and chains
    nothing (``raise ... from None``: the message is the whole story)."""
    with pytest.raises(ConfigurationError) as caught:
        call()
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert (caught.value.__cause__ is None and caught.value.__suppress_context__) or (
        caught.value.__context__ is None
    ), "a chained internal traceback above the message"
    assert rlmetrics.current() is None
    return caught.value


def test_a_misspelt_file_key_names_itself_not_the_valid_key_beside_it(config: Any) -> None:
    config("[backends.jsonl]\npath = 'm.jsonl'\npth = 'n.jsonl'\n")
    error = _raises(
        rlmetrics.Logger, "no option 'pth'", "(from rlmetrics.toml [backends.jsonl] pth)"
    )
    assert "[backends.jsonl] path)" not in str(error)


def test_a_misspelt_option_of_the_default_backend_is_said_at_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RLMETRICS_BACKEND_JSONL_PTH", "m.jsonl")
    error = _raises(
        rlmetrics.Logger,
        "backend 'jsonl' has no option 'pth' (did you mean 'path'?)",
        "(from RLMETRICS_BACKEND_JSONL_PTH)",
    )
    assert "not chosen" not in str(error)
    monkeypatch.delenv("RLMETRICS_BACKEND_JSONL_PTH")
    # The default backend's option alone configures the default backend.
    monkeypatch.setenv("RLMETRICS_BACKEND_JSONL_PATH", str(tmp_path / "env.jsonl"))
    with rlmetrics.Logger() as logger:
        logger.log_metrics({"x": 1.0}, step=1)
    assert [row["metrics"] for row in read_jsonl(tmp_path / "env.jsonl")] == [{"x": 1.0}]


@pytest.mark.parametrize(
    ("variables", "file", "call", "fragments"),
    [
        ({"RLMETRICS_EXPORTERS": "otlpp"}, "", "start", ["'otlpp'", "(from RLMETRICS_EXPORTERS)"]),
        (
            {},
            "[exporters.promethus]\n",
            "start",
            ["'promethus'", "did you mean 'prometheus'", "(from rlmetrics.toml [exporters])"],
        ),
        ({"RLMETRICS_BACKENDS": "jsonn"}, "", "logger", ["'jsonn'", "(from RLMETRICS_BACKENDS)"]),
        ({}, "[backends.jsonn]\n", "logger", ["'jsonn'", "(from rlmetrics.toml [backends])"]),
        (
            {"RLMETRICS_KEY_MAP": "trll"},
            "",
            "logger",
            ["unknown key map 'trll'", "(from RLMETRICS_KEY_MAP)"],
        ),
        (
            {},
            "[logger]\nkey_map = 'trll'\n",
            "logger",
            ["unknown key map 'trll'", "(from rlmetrics.toml [logger] key_map)"],
        ),
    ],
)
def test_an_unknown_name_names_its_source(
    config: Any,
    monkeypatch: pytest.MonkeyPatch,
    variables: dict[str, str],
    file: str,
    call: str,
    fragments: list[str],
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    if file:
        config(file)
    _raises(rlmetrics.start if call == "start" else rlmetrics.Logger, *fragments)


@pytest.mark.parametrize(
    ("file", "variables", "fragments"),
    [
        (
            "[exporters.prometheus]\nport = 0\nstall_after_s = 'soon'\n",
            {},
            [
                "option 'stall_after_s' must be a positive number, got str",
                "(from rlmetrics.toml [exporters.prometheus] stall_after_s)",
            ],
        ),
        (
            "",
            {"RLMETRICS_EXPORTERS": "prometheus", "RLMETRICS_EXPORTER_PROMETHEUS_PORT": "ninety"},
            [
                "option 'port' must be a port number",
                "got str",
                "(from RLMETRICS_EXPORTER_PROMETHEUS_PORT)",
            ],
        ),
        (
            "[exporters.otlp]\ntimeout_s = 'five'\n",
            {},
            [
                "exporter 'otlp' option 'timeout_s' must be a positive number, got str",
                "(from rlmetrics.toml [exporters.otlp] timeout_s)",
            ],
        ),
        (
            "",
            {"RLMETRICS_EXPORTERS": "otlp", "RLMETRICS_EXPORTER_OTLP_ENDPOINT": "4317"},
            [
                "exporter 'otlp' option 'endpoint' must be a string, got int 4317",
                "(from RLMETRICS_EXPORTER_OTLP_ENDPOINT)",
            ],
        ),
        (
            "[exporters.otlp_file]\npath = 5\n",
            {},
            ["option 'path' must be a path", "(from rlmetrics.toml [exporters.otlp_file] path)"],
        ),
    ],
)
def test_a_wrong_type_option_names_its_source_before_anything_starts(
    config: Any,
    monkeypatch: pytest.MonkeyPatch,
    file: str,
    variables: dict[str, str],
    fragments: list[str],
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    if file:
        config(file)
    error = _raises(rlmetrics.start, *fragments)
    assert "holds" not in str(error)  # not "another process holds the port"


def test_a_wrong_type_option_from_the_call_is_refused_too(tmp_path: Path) -> None:
    _raises(
        lambda: rlmetrics.start(exporters={"otlp": {"timeout_s": "5"}}),
        "option 'timeout_s' must be a positive number, got str",
    )
    _raises(
        lambda: rlmetrics.start(exporters={"prometheus": {"port": 70000}}),
        "must be a port number",
        "got int 70000",
    )
    _raises(
        lambda: rlmetrics.Logger(backends={"jsonl": {"path": 3}}),
        "backend 'jsonl' option 'path' must be a path",
    )
    # An empty path is no file (the backend was skipped: "cannot append to .").
    _raises(
        lambda: rlmetrics.Logger(backends={"jsonl": {"path": " "}}),
        "backend 'jsonl' option 'path' must be a path",
        "got str ' '",
    )
    _raises(
        lambda: rlmetrics.Logger(backends={"console": {"max_keys": "50"}}),
        "option 'max_keys' must be a positive integer",
    )


def test_a_wrong_shortcut_argument_names_the_argument_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A variable the argument replaces is not named either.
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1")
    # The user wrote prometheus_port=, not the exporter's option 'port': name what they wrote,
    # and not a variable whose value the argument replaced.
    error = _raises(
        lambda: rlmetrics.start(exporters=["prometheus"], prometheus_port="9464"),
        "option 'port' must be a port number",
        "got str '9464' (from start(prometheus_port=))",
    )
    _raises(
        lambda: rlmetrics.start(exporters=["prometheus"], prometheus_host=5),
        "(from start(prometheus_host=))",
    )
    _raises(
        lambda: rlmetrics.start(exporters=["otlp"], otlp_endpoint=4317),
        "(from start(otlp_endpoint=))",
    )
    assert "RLMETRICS" not in str(error)


@pytest.mark.parametrize("special", ["/dev/zero", "/dev/full", "fifo", "folder"])
def test_the_configuration_file_is_read_only_when_it_is_a_regular_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, special: str
) -> None:
    path = special
    if special == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)  # opening it to read would wait for a writer forever
    elif special == "folder":
        path = str(tmp_path)
    monkeypatch.setenv("RLMETRICS_CONFIG", path)
    _raises(rlmetrics.Logger, f"RLMETRICS_CONFIG={path}", "is not a regular file")
    _raises(rlmetrics.start, "is not a regular file")


def test_a_relative_file_missing_after_the_loop_moved_says_where_it_was_looked_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # RLMETRICS_CONFIG=rlmetrics.toml is read from the working directory of the call; a
    # script (Hydra's job.chdir) may have moved to its output folder by then.
    (tmp_path / "rlmetrics.toml").write_text("[logger]\nqueue_size = 5\n")
    (tmp_path / "outputs").mkdir()
    monkeypatch.setenv("RLMETRICS_CONFIG", "rlmetrics.toml")
    monkeypatch.chdir(tmp_path / "outputs")
    _raises(
        rlmetrics.Logger,
        "RLMETRICS_CONFIG=rlmetrics.toml",
        str(tmp_path / "outputs" / "rlmetrics.toml"),
        "working directory",
    )


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: rlmetrics.start(strict="false"), "start(): strict"),
        (lambda: rlmetrics.start(resume="no", run_id="job-1"), "start(): resume"),
        (lambda: rlmetrics.start(traces="false"), "start(): traces"),
        (lambda: rlmetrics.Logger(backends={}, strict="false"), "Logger(): strict"),
        (lambda: rlmetrics.Logger(backends={}, resume="no", run_id="j"), "Logger(): resume"),
    ],
    ids=["start-strict", "start-resume", "start-traces", "logger-strict", "logger-resume"],
)
def test_a_switch_given_as_text_is_refused_not_read_as_on(call: Any, argument: str) -> None:
    # An argparse or environment string ("false", "no") is a true value to Python: taken as
    # it is, strict="false" turned strict mode on and resume="no" resumed the run.
    from rlmetrics._warn import strict_mode

    _raises(call, argument, "must be true or false, got str")
    assert not strict_mode()


@pytest.mark.parametrize("argument", ["plugins", "disable_plugins"])
def test_one_plugin_name_given_as_a_string_is_refused_as_a_string(argument: str) -> None:
    # start(plugins="training") was read letter by letter: "names no installed plugin: 't';
    # 'r'; 'a'; ..." hid what to change.
    error = _raises(lambda: rlmetrics.start(**{argument: "training"}), f"start(): {argument}")
    assert "'t'; 'r'" not in str(error) and "['training']" in str(error)


@pytest.mark.parametrize("text", ["123", "2024-01-01", "1e5", "true", "inf"])
def test_a_path_option_variable_that_reads_as_toml_is_its_text(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str
) -> None:
    # "a path or a host needs no quotes" (docs/configuration.md): a file named 123 or a run
    # folder named by its date is a path, though TOML reads the text as a number or a date.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RLMETRICS_BACKEND_JSONL_PATH", text)
    with rlmetrics.Logger() as logger:
        logger.log_metrics({"x": 1.0}, step=0, prefix="train")
    assert [row["metrics"] for row in read_jsonl(tmp_path / text)] == [{"x": 1.0}]


def test_an_option_variable_of_the_wrong_kind_is_still_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RLMETRICS_BACKENDS", "console")
    monkeypatch.setenv("RLMETRICS_BACKEND_CONSOLE_MAX_KEYS", "ten")
    _raises(rlmetrics.Logger, "'max_keys' must be a positive integer, got str")


def test_the_configuration_file_is_read_up_to_its_bound(config: Any) -> None:
    path = config("# " + "x" * MAX_CONFIG_BYTES + "\n")
    _raises(rlmetrics.start, f"RLMETRICS_CONFIG={path} is larger than {MAX_CONFIG_BYTES} bytes")
    config("# " + "x" * (MAX_CONFIG_BYTES - 100) + "\n[telemetry]\nservice_name = 'big'\n")
    with rlmetrics.start() as handle:
        assert handle.service_name == "big"


@pytest.mark.parametrize(
    ("make", "fragments"),
    [
        (lambda: rlmetrics.Logger(backends={"jsonl": {"pth": "m"}}), ["has no option 'pth'"]),
        (lambda: rlmetrics.start(exporters={"otlp": {"timeout_s": "x"}}), ["timeout_s"]),
        (lambda: rlmetrics.Logger(key_map="trll"), ["unknown key map 'trll'"]),
    ],
)
def test_a_python_api_mistake_is_one_exception_without_a_chained_traceback(
    make: Any, fragments: list[str]
) -> None:
    _raises(make, *fragments)


def test_malformed_toml_is_one_exception(config: Any) -> None:
    config("[telemetry\n")
    _raises(rlmetrics.start, "not valid TOML")


def test_a_taken_port_is_one_exception_without_a_chained_traceback() -> None:
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(
            rlmetrics.TelemetryError, match=r"cannot listen on 127\.0\.0\.1:.*holds it"
        ) as caught:
            rlmetrics.start(exporters={"prometheus": {"port": port}})
    assert caught.value.__suppress_context__ and caught.value.__cause__ is None
    assert rlmetrics.current() is None


def test_a_host_no_resolver_takes_is_one_telemetry_error() -> None:
    with pytest.raises(rlmetrics.TelemetryError, match="Check the host") as caught:
        rlmetrics.start(exporters={"prometheus": {"host": "x" * 300, "port": 0}})
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert rlmetrics.current() is None


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("RLMETRICS_STALL_AFTER_S", "soon"),
        ("RLMETRICS_STALL_AFTER_S", "-5"),
        ("OTEL_EXPORTER_PROMETHEUS_PORT", "ninety"),
    ],
)
def test_the_config_command_checks_the_prometheus_variables_when_code_chooses_it(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, variable: str, value: str
) -> None:
    """Before: checked only when the file or RLMETRICS_EXPORTERS named the exporter, so with
    the quickstart's ``start(exporters=["prometheus"])`` ``rlmetrics config`` passed (exit 0)
    what that start() then refused."""
    from rlmetrics.cli import main

    monkeypatch.setenv(variable, value)
    assert main(["config"]) == 2
    assert f"{variable}={value!r}" in capsys.readouterr().err
    with pytest.raises(rlmetrics.TelemetryError, match=variable):
        rlmetrics.start(exporters={"prometheus": {"host": "127.0.0.1"}})
    assert rlmetrics.current() is None


@pytest.mark.parametrize(
    ("file", "variables", "fragment"),
    [
        (
            "[exporters.prometheus]\nstall_after_s = 'soon'\n",
            {},
            "(from rlmetrics.toml [exporters.prometheus] stall_after_s)",
        ),
        ("[logger]\nkey_map = 'trll'\n", {}, "(from rlmetrics.toml [logger] key_map)"),
        ("", {"RLMETRICS_KEY_MAP": "trll"}, "(from RLMETRICS_KEY_MAP)"),
        ("[telemetry]\nresume = true\n", {}, "(from rlmetrics.toml [telemetry] resume)"),
        ("[telemetry]\ndisable_plugins = ['nonesuch']\n", {}, "rlmetrics.toml [telemetry]"),
        (
            "[exporters.prometheus]\n",
            {"RLMETRICS_STALL_AFTER_S": "soon"},
            "RLMETRICS_STALL_AFTER_S",
        ),
        ("", {"RLMETRICS_STRICT": "maybe"}, "RLMETRICS_STRICT='maybe'"),
        (
            "[telemetry]\nresource = {team = {name = 'rl'}}\n",
            {},
            "rlmetrics.toml [telemetry] resource must be a table of resource attributes",
        ),
        ("[telemetry]\nresource = {tags = [1, 'a']}\n", {}, "[telemetry] resource"),
    ],
)
def test_the_config_command_exits_2_on_what_start_or_logger_refuses(
    config: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
    file: str,
    variables: dict[str, str],
    fragment: str,
) -> None:
    from rlmetrics.cli import main

    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    if file:
        config(file)
    assert main(["config"]) == 2
    assert fragment in capsys.readouterr().err
    # ... and each is what start() or Logger() refuses.
    with (
        pytest.raises((ConfigurationError, rlmetrics.TelemetryError)),
        rlmetrics.start() as handle,
        rlmetrics.Logger(),
    ):
        assert handle is not None
    assert rlmetrics.current() is None


def test_the_config_command_prints_every_setting_with_its_source(
    config: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from rlmetrics.cli import main

    config("[telemetry]\nservice_name = 'a'\n\n[logger]\nqueue_size = 8\n")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    monkeypatch.setenv("RLMETRICS_STRICT", "0")
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    assert "telemetry.service_name = 'from-env'  (OTEL_SERVICE_NAME)" in out
    assert "telemetry.strict = False  (RLMETRICS_STRICT)" in out
    assert "telemetry.traces = True  (default)" in out
    assert "logger.queue_size = 8  (rlmetrics.toml [logger] queue_size)" in out
    assert "logger.finish_timeout_s = 30.0  (default)" in out


@pytest.mark.parametrize(
    ("variable", "value", "shown"),
    [
        ("SLURM_JOB_ID", "4242", "'4242'  (SLURM_JOB_ID)"),
        ("TORCHELASTIC_RUN_ID", "c0ffee", "'c0ffee'  (TORCHELASTIC_RUN_ID)"),
        ("OTEL_RESOURCE_ATTRIBUTES", "rlmetrics.run.id=r7", "'r7'  (OTEL_RESOURCE_ATTRIBUTES)"),
    ],
)
def test_the_config_command_shows_the_run_id_a_launcher_gives(
    config: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any, variable: str, value: str, shown: str
) -> None:
    """Before: ``telemetry.run_id = None  (default)`` under SLURM or torchrun, though start()
    names the run by the launcher's id: the one check before a long job said the wrong run."""
    from rlmetrics.cli import main

    for name in ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "OTEL_RESOURCE_ATTRIBUTES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, value)
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    assert f"telemetry.run_id = {shown}" in out
    with rlmetrics.start() as handle:
        assert f"{handle.run_id!r}  ({variable})" == shown


def test_a_configured_logger_identity_mistake_names_its_source(
    config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the fuzz property: a file's [logger] run_id other than the running
    telemetry's raised a bare ValueError."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    config("[logger]\nrun_id = 'other'\n")
    with rlmetrics.start(run_id="this-run"):
        _raises_here = pytest.raises(ConfigurationError, match=r"\[logger\] run_id\)$")
        with _raises_here as caught:
            rlmetrics.Logger(backends={"console": {}})
        assert caught.value.__cause__ is None
    config("[logger]\nresume = true\n")
    _raises(
        lambda: rlmetrics.Logger(backends={"console": {}}), "(from rlmetrics.toml [logger] resume)"
    )


@pytest.mark.parametrize("value", ["[]", '[""]', '["token", ""]'])
def test_a_redact_list_the_logger_refuses_is_refused_naming_its_source(
    config: Any, value: str
) -> None:
    """The fuzz's find: ``redact = []`` (ambiguous: nothing more, or nothing at all?) passed
    the file's check and was refused later by the Logger with a ValueError naming no source."""
    config(f"[logger]\nredact = {value}\n")
    _raises(
        rlmetrics.Logger,
        "rlmetrics.toml [logger] redact must be true, false or a non-empty list of key names",
    )


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        # What the file refuses, the call refused only by failing later: a bare TypeError
        # from a comparison, or not at all (an unbounded queue, a finish that waits nothing).
        (
            lambda: rlmetrics.Logger(backends={}, queue_size=0),
            "Logger(): queue_size must be a positive integer, got int 0",
        ),
        (
            lambda: rlmetrics.Logger(backends={}, queue_size="5"),
            "Logger(): queue_size must be a positive integer, got str",
        ),
        (
            lambda: rlmetrics.Logger(backends={}, finish_timeout_s=-1),
            "Logger(): finish_timeout_s must be a number of 0 or more, got int -1",
        ),
        # An int past str()'s 4,300 digits is described by its size, not raised from repr().
        (
            lambda: rlmetrics.Logger(backends={}, queue_size=-(10**5000)),
            "Logger(): queue_size must be a positive integer, got int of 16610 bits",
        ),
        (
            lambda: rlmetrics.Logger(backends={}, max_cell_bytes="big"),
            "Logger(): max_cell_bytes must be a positive integer, got str",
        ),
        (
            lambda: rlmetrics.start(export_interval_s="5"),
            "start(): export_interval_s must be a positive number, got str",
        ),
        (
            lambda: rlmetrics.start(resource=5),
            "start(): resource must be a table of resource attributes, got int 5",
        ),
        (
            lambda: rlmetrics.start(service_name=5),
            "start(): service_name must be a string, got int 5",
        ),
        # A choice that is no name, names or mapping: a TypeError or ValueError from inside.
        (
            lambda: rlmetrics.start(exporters=5),
            "start(exporters=...) takes a mapping of "
            "exporter names to options, a name or names; got an int",
        ),
        (
            lambda: rlmetrics.Logger(backends=5),
            "Logger(backends=...) takes a mapping of backend "
            "names to options, a name or names; got an int",
        ),
        (
            lambda: rlmetrics.Logger(backends=["jsonl", 5]),
            "Logger(backends=...) takes a mapping "
            "of backend names to options, a name or names; got a list",
        ),
    ],
)
def test_a_call_argument_the_file_would_refuse_is_refused_from_the_call(
    call: Any, fragment: str
) -> None:
    _raises(call, fragment)


@pytest.mark.parametrize("backends", ["jsonl", ["jsonl"], ("jsonl",)])
def test_backends_are_chosen_by_name_as_exporters_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backends: Any
) -> None:
    """``Logger(backends=["jsonl"])``, as ``start(exporters=["otlp"])``: each with its default
    options (before: ``ValueError: dictionary update sequence element #0 has length 5``)."""
    monkeypatch.chdir(tmp_path)
    with rlmetrics.Logger(backends=backends) as logger:
        logger.log_metrics({"loss": 1.0}, step=1)
    assert list(logger.backends) == ["jsonl"]
    assert [row["metrics"] for row in read_jsonl(tmp_path / "rlmetrics.jsonl")] == [{"loss": 1.0}]


#: Every setting an environment variable gives as one of a few words: the variable, the table
#: and setting it gives, and each word with the value it reads as.
_WORD_VARIABLES = [
    ("RLMETRICS_UNKNOWN_KEYS", "logger", "unknown_keys", {"warn": "warn", "error": "error"}),
    ("RLMETRICS_STRICT", "telemetry", "strict", {"true": True, "off": False, "yes": True}),
    ("OTEL_TRACES_EXPORTER", "telemetry", "traces", {"none": False, "otlp": True}),
    ("RLMETRICS_NAMING", "telemetry", "naming", {"rl_proposal": "rl_proposal"}),
    ("RLMETRICS_KEY_MAP", "logger", "key_map", {"trl": "trl", "openrlhf": "openrlhf"}),
]


@given(
    case=st.sampled_from(
        [
            (v, t, s, word, read)
            for v, t, s, words in _WORD_VARIABLES
            for word, read in words.items()
        ]
    ),
    upper=st.lists(st.booleans(), min_size=11, max_size=11),
)
def test_a_word_a_variable_gives_is_read_whatever_its_case(
    case: tuple[str, str, str, str, Any], upper: list[bool]
) -> None:
    """Before: RLMETRICS_UNKNOWN_KEYS=WARN was warn, but RLMETRICS_NAMING=RL_PROPOSAL and
    RLMETRICS_KEY_MAP=TRL were refused by start() and Logger() (and `rlmetrics config` let
    a misspelt naming through). A variable's word is read in any case, as OpenTelemetry
    reads its own (the spec: enum values are case-insensitive)."""
    from rlmetrics.cli.config import check

    variable, table, name, word, read = case
    upper = upper[: len(word)]
    spelled = "".join(ch.upper() if up else ch for ch, up in zip(word, upper, strict=True))
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("RLMETRICS_CONFIG", raising=False)
        patch.setenv(variable, spelled)
        assert check()[1][table][name] == (read, variable)


def test_a_naming_or_key_map_variable_in_capitals_reaches_start_and_the_logger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLMETRICS_NAMING", "RL_PROPOSAL")
    monkeypatch.setenv("RLMETRICS_KEY_MAP", "TRL")
    path = tmp_path / "m.jsonl"
    with rlmetrics.start() as handle:
        assert handle.settings["naming"] == ("rl_proposal", "RLMETRICS_NAMING")
        with rlmetrics.Logger(backends={"jsonl": {"path": str(path)}}) as logger:
            assert logger.settings["key_map"] == ("trl", "RLMETRICS_KEY_MAP")
            logger.log_metrics({"loss": 0.5}, step=1)
    assert [row["metrics"] for row in read_jsonl(path)] == [{"loss": 0.5}]


def test_the_config_command_refuses_a_naming_start_refuses(
    monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Before: `rlmetrics config` showed RLMETRICS_NAMING=rl-proposal and exited 0; start()
    then refused it."""
    from rlmetrics.cli import main

    monkeypatch.delenv("RLMETRICS_CONFIG", raising=False)
    monkeypatch.setenv("RLMETRICS_NAMING", "rl-proposal")
    _raises(rlmetrics.start, "naming must be one of", "(from RLMETRICS_NAMING)")
    assert main(["config"]) == 2
    said = capsys.readouterr().err
    assert "naming must be one of" in said and "RLMETRICS_NAMING" in said, said


@pytest.mark.parametrize("where", ["file", "variable"])
def test_a_path_configured_under_home_is_under_home(
    config: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any, where: str
) -> None:
    """Before: ``[backends.jsonl] path = "~/runs/m.jsonl"`` (or the option's variable, set
    where no shell expands it: a container's ENV, a launcher's env table) wrote a folder named
    ``~`` in the working directory, and the run's rows were not where the user looked. A path
    the file or a variable gives takes ``~`` as the home folder, as a shell would."""
    from rlmetrics.cli import main

    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    if where == "file":
        config("[backends.jsonl]\npath = '~/runs/m.jsonl'\n\n[exporters.otlp_file]\npath = '~/o'\n")
        # The file itself named under home, as a container's ENV gives it.
        (tmp_path / "rlmetrics.toml").rename(home / "rlmetrics.toml")
        monkeypatch.setenv("RLMETRICS_CONFIG", "~/rlmetrics.toml")
    else:
        config("[exporters.otlp_file]\n")
        monkeypatch.setenv("RLMETRICS_BACKEND_JSONL_PATH", "~/runs/m.jsonl")
        monkeypatch.setenv("RLMETRICS_EXPORTER_OTLP_FILE_PATH", "~/o")
    assert main(["config"]) == 0
    shown = capsys.readouterr().out
    assert f"jsonl.path = {str(home / 'runs' / 'm.jsonl')!r}" in shown, shown
    assert f"otlp_file.path = {str(home / 'o')!r}" in shown, shown
    with rlmetrics.Logger() as logger:
        logger.log_metrics({"loss": 0.5}, step=1, prefix="train")
    assert [row["metrics"] for row in read_jsonl(home / "runs" / "m.jsonl")] == [{"loss": 0.5}]
    assert not (work / "~").exists()


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            "[logger]\nunknown_keys = 'WARN'\n",
            "must be one of 'ignore', 'warn', 'error', got str 'WARN'",
        ),
        ("[exporters.prometheus]\nport = '9464'\n", "got str '9464'"),
        ("[logger]\nqueue_size = '" + "9" * 200 + "'\n", "got str '" + "9" * 40),
    ],
)
def test_a_refused_text_value_is_shown(config: Any, text: str, said: str) -> None:
    """Before: 'rlmetrics.toml [logger] unknown_keys must be one of 'ignore', 'warn', 'error',
    got str': the value refused was not shown (a text value is shown, cut when long)."""
    config(text)
    caught = _raises(
        lambda: (
            rlmetrics.start(exporters=["prometheus"], prometheus_port=0)
            if "exporters" in text
            else rlmetrics.Logger(backends={})
        ),
        said,
    )
    assert len(str(caught)) < 300
