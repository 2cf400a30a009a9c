from __future__ import annotations

import logging
from typing import Any

from rlmetrics import warn_once


def test_first_warning_has_a_traceback_then_debug(caplog: Any) -> None:
    with caplog.at_level(logging.DEBUG, logger="rlmetrics"):
        for _ in range(3):
            try:
                raise ValueError("sink down")
            except ValueError:
                warn_once("sink", "sink failed")
        warn_once("other", "other failed")
    records = [(r.levelno, r.getMessage(), bool(r.exc_info)) for r in caplog.records]
    assert records == [
        (logging.WARNING, "sink failed", True),
        (logging.DEBUG, "sink failed", True),
        (logging.DEBUG, "sink failed", True),
        (logging.WARNING, "other failed", False),
    ]
    assert "ValueError: sink down" in caplog.text
    # Outside an except block the report is its one line: no stack.
    assert not caplog.records[-1].stack_info and not caplog.records[-1].exc_info
