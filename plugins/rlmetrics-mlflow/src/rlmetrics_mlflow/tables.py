"""A sample table appended to at its step, every cell's type kept.

MLflow's ``log_table`` appends to a table artifact that exists already (a second table of a
name at one step: trajectories finishing one by one, a resumed run logging its step again), but
it reads the earlier rows back through pandas, which makes a column of ints that the new rows
lack (or the earlier ones lacked) float64: ``3`` is written back as ``3.0`` and an int past
2**53 rounded. So the backend appends itself: it reads the earlier rows with Python's exact JSON
parser, writes the whole table as ``log_table`` writes one, and puts it in place of the old.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlflow.tracking import MlflowClient

__all__ = ["appended", "earlier_table", "replace_table"]


def earlier_table(client: MlflowClient, run_id: str, artifact: str) -> dict[str, Any] | None:
    """The table ``artifact`` of the run as written (``{"columns", "data"}``), or None when the
    run has no such artifact or it is not a table of that form."""
    folder = artifact.rpartition("/")[0] or None
    if artifact not in {info.path for info in client.list_artifacts(run_id, folder)}:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = client.download_artifacts(run_id, artifact, tmp)
        try:
            table = json.loads(Path(path).read_text(encoding="utf-8"))
        except ValueError:  # not JSON: MLflow's own append says what it makes of it
            return None
    if not isinstance(table, dict) or not isinstance(table.get("columns"), list):
        return None
    if not isinstance(table.get("data"), list):
        return None
    return table


def appended(earlier: Mapping[str, Any], data: Mapping[str, list[Any]]) -> dict[str, list[Any]]:
    """The earlier table's rows, then ``data``'s, column by column: the earlier columns in
    their order, then the new ones; a cell a row has no column for is None."""
    columns: list[str] = list(earlier["columns"])
    rows: list[list[Any]] = earlier["data"]
    added = len(next(iter(data.values()), []))
    out: dict[str, list[Any]] = {}
    for column in dict.fromkeys([*columns, *data]):
        where = columns.index(column) if column in columns else None
        before = [row[where] if where is not None and where < len(row) else None for row in rows]
        out[column] = before + list(data.get(column, [None] * added))
    return out


def replace_table(client: MlflowClient, run_id: str, frame: Any, artifact: str) -> None:
    """``frame`` written as ``log_table`` writes a table, in place of the run's ``artifact``
    (which ``log_table`` listed among the run's tables when it first wrote it)."""
    folder, _, name = artifact.rpartition("/")
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / name
        frame.to_json(local, orient="split", index=False, date_format="iso")
        client.log_artifact(run_id, str(local), folder or None)
