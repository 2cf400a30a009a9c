from __future__ import annotations

import io
import json
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from rlmetrics import Logger
from rlmetrics.backends.console import ConsoleBackend
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.testing import isolated_state


def test_one_line_per_call_with_prefixed_keys() -> None:
    stream = io.StringIO()
    backend = ConsoleBackend(stream=stream, max_keys=2)
    backend.log_metrics({"loss": 0.123456789, "reward": 1, "kl": 0.5}, step=3, prefix="train")
    backend.log_metrics({"telemetry/wall_time_seconds": 10.0}, step=0, prefix="rollout/throughput")
    assert stream.getvalue().splitlines() == [
        "step 3 | train/loss=0.123457 train/reward=1 ... 1 more",
        "step 0 | telemetry/wall_time_seconds=10",
    ]


class _ScalarTensor:
    """A one-element tensor as torch prints it: its str() is not its number."""

    def item(self) -> float:
        return 0.123456789

    def __str__(self) -> str:
        return "tensor(0.1235, device='cuda:0', grad_fn=<MeanBackward0>)"


def test_a_scalar_tensor_numpy_scalar_or_decimal_is_printed_as_its_number() -> None:
    # The line had "loss=tensor(0.1235, device='cuda:0', grad_fn=<MeanBackward0>)", a NumPy
    # float32 all its digits, where a float is 6 significant digits.
    np = pytest.importorskip("numpy")
    stream = io.StringIO()
    backend = ConsoleBackend(stream=stream)
    backend.log_metrics(
        {
            "loss": _ScalarTensor(),
            "kl": np.float32(0.123456789),
            "lr": np.array(0.5),
            "share": Decimal("0.25"),
            "done": True,
            "note": "ok",
        },
        step=3,
        prefix="train",
    )
    assert stream.getvalue() == (
        "step 3 | train/loss=0.123457 train/kl=0.123457 train/lr=0.5 train/share=0.25 "
        "train/done=True train/note=ok\n"
    )


def _json_rows(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_json_format_prints_the_jsonl_row_of_every_call(tmp_path: Path) -> None:
    stream = io.StringIO()
    path = tmp_path / "m.jsonl"
    with isolated_state():
        logger = Logger(
            backends={"jsonl": {"path": str(path)}, "console": {"stream": stream, "format": "json"}}
        )
        logger.log_metrics(
            {"reward": 0.5, "kl": float("nan"), "big": 10**5000}, step=3, prefix="train"
        )
        logger.log_metrics({"loss": 1.25}, step=4, prefix="train")
        logger.finish()
    printed = _json_rows(stream.getvalue())
    assert stream.getvalue().count("\n") == 2  # no human line beside them
    written = list(read_jsonl(path))
    for row in printed + written:
        del row["time"]
    assert printed == written
    assert printed[0]["run_id"] == logger.identity.run_id
    assert printed[0]["metrics"] == {"reward": 0.5, "kl": "nan", "big": "<int of 5001 digits>"}


def test_json_format_prints_a_decimal_as_its_number() -> None:
    # Before, the row had "Decimal('0.25')": a script parsing the job's log got text.
    stream = io.StringIO()
    backend = ConsoleBackend(stream=stream, format="json")
    backend.log_metrics({"lr": Decimal("0.25"), "share": Fraction(1, 4)}, step=1, prefix="")
    [row] = _json_rows(stream.getvalue())
    assert row["metrics"] == {"lr": 0.25, "share": 0.25}


def test_both_prints_the_human_line_then_the_row() -> None:
    stream = io.StringIO()
    backend = ConsoleBackend(stream=stream, format="both")
    backend.log_metrics({"loss": 0.5}, step=2, prefix="train")
    human, row = stream.getvalue().splitlines()
    assert human == "step 2 | train/loss=0.5"
    assert {k: v for k, v in json.loads(row).items() if k not in ("time", "run_id")} == {
        "step": 2,
        "prefix": "train",
        "metrics": {"loss": 0.5},
    }


def test_an_unknown_format_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="one of \\['text', 'json', 'both'\\], got 'yaml'"):
        ConsoleBackend(format="yaml")  # type: ignore[arg-type]


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_odd_text_keeps_one_line_per_call_and_costs_only_itself() -> None:
    # A newline in a value or a key split the row over lines (a log parser read garbage, an
    # escape sequence reached the terminal), and a value whose str() raised lost the row.
    stream = io.StringIO()
    with isolated_state():
        logger = Logger(backends={"console": {"stream": stream}})
        logger.log_metrics(
            {"note": "line1\nline2\r", "k\ney": 1.0, "esc": "\x1b[2J", "odd": _Unprintable()},
            step=1,
            prefix="train",
        )
        logger.log_metrics({"text": "héllo ✓"}, step=2, prefix="train")
        logger.finish()
    lines = stream.getvalue().splitlines()
    assert lines[0] == (
        "step 1 | train/note=line1\\nline2\\r train/k\\ney=1 train/esc=\\x1b[2J "
        "train/odd=<unprintable _Unprintable>"
    )
    assert lines[1:] == ["step 2 | train/text=héllo ✓"]
    assert logger._inline["console"].failed == 0


def test_a_stream_that_cannot_encode_a_character_gets_it_escaped() -> None:
    # A console whose encoding lacks a character (PYTHONIOENCODING=ascii, a cp1252 console)
    # raised UnicodeEncodeError: the row was lost, said as a bug with its traceback.
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii")
    backend = ConsoleBackend(stream=stream)
    backend.log_metrics({"prompt": "héllo ✓", "x": 1.0}, step=1, prefix="")
    backend.finish()
    assert raw.getvalue().decode("ascii") == "step 1 | prompt=h\\xe9llo \\u2713 x=1\n"
