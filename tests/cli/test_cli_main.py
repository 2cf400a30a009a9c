"""The ``rlmetrics`` entry point as users run it: a subprocess of the installed environment."""

from __future__ import annotations

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
