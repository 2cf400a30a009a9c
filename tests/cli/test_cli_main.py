"""The ``rlmetrics`` entry point as users run it: a subprocess of the installed environment."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import rlmetrics
from rlmetrics.cli import COMMANDS, parser

#: The console script the installed distribution put beside this interpreter.
RLMETRICS = str(Path(sys.executable).with_name("rlmetrics"))


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RLMETRICS, *args], capture_output=True, text=True, timeout=120)


def test_version() -> None:
    done = _run("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"rlmetrics {rlmetrics.__version__}"


def test_every_option_has_help() -> None:
    top = parser()
    subparsers = next(a for a in top._actions if a.dest == "command")
    for command in COMMANDS:
        sub = subparsers.choices[command.NAME]  # type: ignore[attr-defined]
        assert command.HELP and sub.description
        for action in sub._actions:
            assert action.help, f"rlmetrics {command.NAME} {action.option_strings} has no help"


def test_every_option_a_command_names_in_its_help_is_its_own() -> None:
    # `rlmetrics stack --help` shares `--set` with `rlmetrics alerts`, whose help pointed at
    # `--list`, an option stack does not have ("unrecognized arguments").
    top = parser()
    subparsers = next(a for a in top._actions if a.dest == "command")
    for command in COMMANDS:
        sub = subparsers.choices[command.NAME]  # type: ignore[attr-defined]
        own = {option for action in sub._actions for option in action.option_strings}
        # Another command's options are named with it (`rlmetrics alerts --list`);
        # `--web.enable-lifecycle` is Prometheus' flag, not an option of ours.
        text = re.sub(
            r"rlmetrics\s+(?!" + command.NAME + r"\b)[a-z]+(\s+--[a-z-]+)+", "", sub.format_help()
        )
        named = set(re.findall(r"(?<![\w.-])(--[a-z][a-z0-9-]*)(?![\w.-])", text))
        assert named <= own, f"rlmetrics {command.NAME} --help names {sorted(named - own)}"


def test_a_misspelt_option_is_said_by_its_command_with_the_nearest() -> None:
    # `rlmetrics demo --stepz 3` was the top-level usage and "unrecognized arguments", naming
    # neither the command whose options those are nor the option meant.
    done = _run("demo", "--stepz", "3")
    assert done.returncode == 2 and not done.stdout
    assert done.stderr.startswith("usage: rlmetrics demo "), done.stderr
    assert done.stderr.splitlines()[-1] == (
        "rlmetrics demo: error: unrecognized arguments: --stepz 3 (did you mean --steps?)"
    )


def test_json_and_markdown_are_mutually_exclusive() -> None:
    done = _run("metrics", "--json", "--markdown")
    assert done.returncode == 2
    assert "not allowed with argument" in done.stderr


@pytest.mark.parametrize("command", ["plugins", "metrics"])
def test_a_reader_that_goes_away_ends_the_command_cleanly(command: str) -> None:
    # `rlmetrics plugins --json | head -1`: the pipe closes after one line.
    producer = subprocess.Popen(
        [RLMETRICS, command, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert producer.stdout is not None and producer.stderr is not None
    producer.stdout.readline()
    producer.stdout.close()
    stderr = producer.stderr.read().decode()
    assert producer.wait(timeout=120) == 0
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr
