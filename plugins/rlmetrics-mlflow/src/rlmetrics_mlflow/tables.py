"""A sample table appended to at its step, every cell's type kept.

MLflow's ``log_table`` appends to a table artifact that exists already (a second table of a
name at one step: trajectories finishing one by one, a resumed run logging its step again), but
it reads the earlier rows back through pandas, which makes a column of ints that the new rows
lack (or the earlier ones lacked) float64: ``3`` is written back as ``3.0`` and an int past
2**53 rounded. So the backend appends itself: it reads the earlier rows with Python's exact JSON
parser, writes the whole table as ``log_table`` writes one, and puts it in place of the old.

The rows it wrote last are kept in memory for the few tables written last (:func:`remember`), so
appending to the table of the current step reads nothing back: ``download_artifacts`` printed a
progress bar on stderr for each call and cost more with every row. Only a table this process
has not written (a resumed run logging its step again) is read back: in place from artifacts on
this disk, else downloaded.
"""

from __future__ import annotations

import json
import tempfile
import threading
import urllib.parse
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlflow.tracking import MlflowClient
from mlflow.utils.file_utils import local_file_uri_to_path
from mlflow.utils.mlflow_tags import MLFLOW_LOGGED_ARTIFACTS
from mlflow.utils.validation import MAX_TAG_VAL_LENGTH

from rlmetrics import resets_process_state

__all__ = [
    "WRITING",
    "appended",
    "earlier_table",
    "forget_run",
    "listable",
    "remember",
    "replace_table",
]

#: Held while a table is read, appended to and written: two backends logging into one run (two
#: Loggers) append to one table in turn, each seeing the other's rows.
WRITING = threading.Lock()
#: How many tables' rows are kept: a step's tables (samples, trajectories, an evaluation's) and
#: the step before's. An older one is read back if it is appended to again.
KEPT_TABLES = 4
# The rows last written, by (tracking store, MLflow run id, artifact), the newest last.
_written: OrderedDict[tuple[str, str, str], dict[str, Any]] = OrderedDict()


@resets_process_state
def _forget_tables() -> None:
    _written.clear()


def _key(client: MlflowClient, run_id: str, artifact: str) -> tuple[str, str, str]:
    return (str(client.tracking_uri), run_id, artifact)


def remember(
    client: MlflowClient, run_id: str, artifact: str, data: Mapping[str, list[Any]]
) -> None:
    """Keep the rows just written to ``artifact`` (column by column, as given to the writer)
    for the next append to it; call with :data:`WRITING` held."""
    key = _key(client, run_id, artifact)
    _written[key] = {
        "columns": list(data),
        "data": [list(row) for row in zip(*data.values(), strict=True)],
    }
    _written.move_to_end(key)
    while len(_written) > KEPT_TABLES:
        _written.popitem(last=False)


def forget_run(client: MlflowClient, run_id: str) -> None:
    """Drop the rows kept for ``run_id``'s tables (its backend finished)."""
    with WRITING:
        for key in [k for k in _written if k[:2] == _key(client, run_id, "")[:2]]:
            del _written[key]


def earlier_table(client: MlflowClient, run_id: str, artifact: str) -> dict[str, Any] | None:
    """The table ``artifact`` of the run as written (``{"columns", "data"}``), or None when the
    run has no such artifact or it is not a table of that form: the rows this process wrote
    last when it has them (:func:`remember`), else read back from the run."""
    kept = _written.get(_key(client, run_id, artifact))
    if kept is not None:
        return kept
    folder = artifact.rpartition("/")[0] or None
    if artifact not in {info.path for info in client.list_artifacts(run_id, folder)}:
        return None
    try:
        table = json.loads(_artifact_text(client, run_id, artifact))
    except ValueError:  # not JSON: MLflow's own append says what it makes of it
        return None
    if not isinstance(table, dict) or not isinstance(table.get("columns"), list):
        return None
    if not isinstance(table.get("data"), list):
        return None
    return table


def _artifact_text(client: MlflowClient, run_id: str, artifact: str) -> str:
    """The text of the run's ``artifact``: read in place from artifacts on this disk (a path
    or ``file:`` URI), else downloaded (``download_artifacts`` prints a progress bar)."""
    root = client.get_run(run_id).info.artifact_uri or ""
    if urllib.parse.urlparse(root).scheme in ("", "file"):
        local = Path(local_file_uri_to_path(root)) / artifact
        if local.is_file():
            return local.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        return Path(client.download_artifacts(run_id, artifact, tmp)).read_text(encoding="utf-8")


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


def listable(client: MlflowClient, run_id: str, artifact: str) -> bool:
    """Whether ``log_table`` can list ``artifact`` among the run's tables: the run tag
    ``mlflow.loggedArtifacts`` (a JSON list, which the Evaluation view reads) holds at most
    MLflow's 8000 characters of a tag, and MLflow cuts a longer one mid-JSON, after which every
    ``log_table`` of the run fails reading it."""
    tag = client.get_run(run_id).data.tags.get(MLFLOW_LOGGED_ARTIFACTS, "[]")
    try:
        listed = json.loads(tag)
    except ValueError:  # cut by an earlier writer: log_table would fail on it
        return False
    entry = {"path": artifact, "type": "table"}
    if not isinstance(listed, list):
        return False
    return entry in listed or len(json.dumps([*listed, entry])) <= MAX_TAG_VAL_LENGTH


def replace_table(client: MlflowClient, run_id: str, frame: Any, artifact: str) -> None:
    """``frame`` written as ``log_table`` writes a table, in place of the run's ``artifact``
    if it has one (``log_table`` listed it among the run's tables when it first wrote it, if
    the list had room: :func:`listable`)."""
    folder, _, name = artifact.rpartition("/")
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / name
        frame.to_json(local, orient="split", index=False, date_format="iso")
        client.log_artifact(run_id, str(local), folder or None)
