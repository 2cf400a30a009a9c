"""Logger.log_hyperparams and Logger.log_samples under hostile input: no exception reaches the
caller, each call returns within a bound, and the good value of the same call lands in the
JSONL file (the hyperparams row; the samples file, written on its own thread).

The default run uses the ``default`` hypothesis profile; the ``fuzz`` tox env runs 10**5
examples each.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fuzz_hostile import hostile_dicts, hostile_keys, hostile_values
from hypothesis import given
from hypothesis import strategies as st
from test_fuzz_entries import _fuzz, _good, _last_row, _size, _steps, _timed

import rlmetrics
from rlmetrics.backends.jsonl import samples_path
from rlmetrics.redaction import REDACTED
from rlmetrics.testing import wait_until


@pytest.fixture
def logger(tmp_path: Path) -> Iterator[tuple[rlmetrics.Logger, Path]]:
    path = tmp_path / "fuzz.jsonl"
    logger = rlmetrics.Logger(backends={"jsonl": {"path": path}}, max_cell_bytes=64)
    yield logger, path
    logger.finish()


def test_fuzz_log_hyperparams(logger: tuple[rlmetrics.Logger, Path]) -> None:
    log, path = logger

    @_fuzz
    @given(hostile=hostile_dicts | hostile_values, lr=_good)
    def check(hostile: Any, lr: float) -> None:
        _timed(lambda: log.log_hyperparams(hostile))
        # The hostile value first: whatever it is (a huge array, a cycle, a surrogate), the
        # keys after it arrive, and a secret among them is redacted.
        config = {"hostile": hostile, "lr": lr, "hub_token": "hf_x"}
        offset = _size(path)
        _timed(lambda: log.log_hyperparams(config))
        row = _last_row(path, offset)
        assert row["kind"] == "hyperparams" and row["hyperparams"]["lr"] == lr
        assert row["hyperparams"]["hub_token"] == REDACTED

    check()


_rows = st.lists(hostile_dicts | hostile_values, max_size=6) | hostile_values


def test_fuzz_log_samples(logger: tuple[rlmetrics.Logger, Path]) -> None:
    log, path = logger
    samples = samples_path(path)
    marks = iter(range(10**9))

    @_fuzz
    @given(
        hostile=_rows,
        step=_steps,
        name=hostile_keys,
        reward=_good,
        text=st.text(),
        cell=hostile_values,
    )
    def check(hostile: Any, step: Any, name: Any, reward: float, text: str, cell: Any) -> None:
        _timed(lambda: log.log_samples(hostile, step=step, name=name))
        mark = next(marks)
        # A hostile cell in the good row costs only itself: the row's other cells arrive.
        good = [{"prompt": f"#{mark}", "judge": cell, "completion": text, "reward": reward}]
        _timed(lambda: log.log_samples(good, step=1))

        found: dict[str, Any] = {}

        def landed() -> bool:
            # Only the file's tail: it grows every example, and reading it whole would make
            # the run quadratic. The writer is another thread: a tail that does not end in a
            # newline is a row still being written, not a torn one.
            size = _size(samples)
            if not size:
                return False
            with samples.open("rb") as handle:
                handle.seek(max(0, size - 65536))
                tail = handle.read()
            if not tail.endswith(b"\n"):
                return False
            # The last row may still be the hostile call's (the writer is behind): only the
            # good row, with its mark, ends the wait.
            found.clear()
            found.update(json.loads(tail.splitlines()[-1])["sample"])
            return found.get("prompt") == f"#{mark}"

        wait_until(landed, 30, "the good sample row")
        sample = found
        assert sample["reward"] == reward
        assert text.encode("utf-8", "surrogatepass").startswith(
            sample["completion"].encode("utf-8", "surrogatepass")
        )

    check()
