"""The MLflow backend: each logged dict becomes one ``log_batch`` call at the trainer step.

It talks to the tracking store through an ``MlflowClient`` of its own and never touches
MLflow's fluent "active run", so it cannot end or log into a run the training script
manages itself. Two Loggers of one run in one process log into one MLflow run, which the last
of them to finish ends (:data:`_created`).
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import mlflow
from mlflow.entities import Metric, Param, RunStatus, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.utils.validation import (
    MAX_METRICS_PER_BATCH,
    MAX_PARAM_VAL_LENGTH,
    MAX_PARAMS_TAGS_PER_BATCH,
)

from rlmetrics import resets_process_state, warn_once
from rlmetrics.backends import (
    BackendUnavailable,
    RoomCheck,
    SharedRuns,
    StepAxis,
    as_step,
    first_line,
    full_key,
    start_within,
)
from rlmetrics.hyperparams import flat_hyperparams, param_text, to_hyperparams
from rlmetrics.identity import RUN_ID_ATTR, RunIdentity
from rlmetrics.samples import columns_of

from .keys import KeyMap
from .tables import (
    WRITING,
    appended,
    earlier_table,
    forget_run,
    listable,
    remember,
    replace_table,
)
from .values import Skipped, metric_values

__all__ = ["DEFAULT_CONNECT_TIMEOUT_S", "MIN_FREE_BYTES", "MlflowBackend"]

_T = TypeVar("_T")

#: How long creating the run may take against a tracking server. MLflow's own defaults
#: (MLFLOW_HTTP_REQUEST_TIMEOUT 120 s, MLFLOW_HTTP_REQUEST_MAX_RETRIES 7 with backoff) hold a
#: black-holed server for about 125 s and a refused port for about 251 s; a healthy server
#: creates a run in well under a second.
DEFAULT_CONNECT_TIMEOUT_S = 10.0
#: The free space a local sqlite store's disk must have for the backend to send it another
#: request: sqlite refuses a write on a full disk ("database or disk is full"), each refusal
#: logged by MLflow as an ERROR with its traceback.
MIN_FREE_BYTES = 1 << 20
#: Tracking-URI schemes of a store on this machine's disk, which no server can stall.
_LOCAL_SCHEMES = frozenset({"file", "sqlite"})

#: The MLflow runs this process's backends log into and have not all finished, by (store,
#: experiment, rlmetrics run id): a second Logger of the run (a trainer callback's beside the
#: script's own) logs into the same MLflow run instead of splitting the run in two, and the
#: last backend to finish ends it.
_created: dict[tuple[str, str, str], tuple[str, object]] = {}  # key: (MLflow run id, token)
_RUNS = SharedRuns()


def _sqlite_folder(uri: str) -> str | None:
    """The folder of a ``sqlite:///`` store's database file, or None (another store, an
    in-memory database)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///") :].partition("?")[0]
    if not path or path == ":memory:":
        return None
    return os.path.dirname(path) or "."


def _disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is sqlite refusing a write on a full disk (``SQLITE_FULL``)."""
    return "database or disk is full" in str(exc)


@resets_process_state
def _forget_created() -> None:
    _created.clear()
    _RUNS.forget()


def _is_local(uri: str) -> bool:
    """Whether ``uri`` names a store on this machine's disk: a ``file:`` or ``sqlite:`` URI or
    a plain path (``mlruns``); ``databricks`` and every server URI are not."""
    scheme = urllib.parse.urlparse(uri).scheme.lower()
    if not scheme:
        return not uri.lower().startswith(("databricks", "uc"))
    return scheme in _LOCAL_SCHEMES


def _end_abandoned_run(connected: tuple[MlflowClient, str]) -> None:
    """A run created after its backend gave up on the server: nothing will log to it."""
    client, run_id = connected
    client.set_terminated(run_id, RunStatus.to_string(RunStatus.KILLED))


def _chunks(items: Sequence[_T], size: int) -> Iterable[Sequence[_T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _param_text(value: Any) -> str:
    """A param value as MLflow stores it: its ``str()`` (as ``mlflow.log_params`` does; dicts
    in a list with their keys sorted: :func:`rlmetrics.hyperparams.param_text`), of at most
    ``MAX_PARAM_VAL_LENGTH`` characters, cut with one warning."""
    text = param_text(value)
    if len(text) <= MAX_PARAM_VAL_LENGTH:
        return text
    warn_once(
        "mlflow:param-cut",
        f"rlmetrics-mlflow: a hyperparameter's value has {len(text)} characters; MLflow keeps "
        f"at most {MAX_PARAM_VAL_LENGTH}, so it is cut to that (the JSONL backend keeps it "
        "whole); later cuts at DEBUG",
    )
    return text[:MAX_PARAM_VAL_LENGTH]


def _artifact_folder(name: str) -> str:
    """A table's ``name`` as its artifact folder: each ``/``-separated part a folder, any
    character but a letter, digit, ``-``, ``_`` or ``.`` as ``_``, no empty, ``.`` or ``..``
    part (``eval/samples`` stays ``eval/samples``; ``../x`` becomes ``x``)."""
    parts = [
        "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in part).strip(".")
        for part in name.split("/")
    ]
    return "/".join(part for part in parts if part) or "samples"


#: What a SQLite store's URL is, for a URL SQLAlchemy refused (``sqlite://mlflow.db``).
_SQLITE_FORMS = (
    "; a SQLite file is sqlite:///relative/path.db or sqlite:////absolute/path.db (three "
    "slashes, then the path)"
)


def _database_errors() -> tuple[type[BaseException], ...]:
    """SQLAlchemy's errors, where it is installed (mlflow-skinny has no database store)."""
    try:
        from sqlalchemy.exc import SQLAlchemyError
    except ImportError:
        return ()
    return (SQLAlchemyError,)


class MlflowBackend:
    """Logs metrics to an MLflow run, creating (or resuming) it at construction.

    :param tracking_uri: where the tracking store is (``sqlite:///mlflow.db``,
        ``http://127.0.0.1:5000``…); default ``MLFLOW_TRACKING_URI``, else MLflow's default.
    :param experiment_name: created when missing; default ``MLFLOW_EXPERIMENT_NAME``, else
        MLflow's Default experiment.
    :param run_name: the new run's name; default ``MLFLOW_RUN_NAME``, else MLflow picks one.
    :param run_id: resume this run instead of creating one; default ``MLFLOW_RUN_ID``.
    :param tags: run tags, set once at start.
    :param params: hyperparameters (nested dicts are flattened with ``/``), logged once at
        start; values become strings, as MLflow params are.
    :param artifact_location: for a newly created experiment only.
    :param identity: the run (given by the Logger): a new MLflow run gets the tag
        ``rlmetrics.run.id``; a resumed one (``resume=True``) continues the run of the
        experiment that carries its id in that tag, if there is one.
    :param connect_timeout_s: how long creating (or resuming) the run may take against a
        tracking server (any store but a local sqlite or file one); past it the backend does
        not start (:class:`~rlmetrics.backends.BackendUnavailable`: the Logger skips it and
        says so once), whatever MLflow's own timeouts and retries would do.
    """

    def __init__(
        self,
        tracking_uri: str | None = None,
        experiment_name: str | None = None,
        run_name: str | None = None,
        run_id: str | None = None,
        tags: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        artifact_location: str | None = None,
        identity: RunIdentity | None = None,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    ) -> None:
        self.tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or None
        self._keys = KeyMap()
        self._finished = False
        #: The token of the MLflow run this backend shares with the process's other backends
        #: of the rlmetrics run (:data:`_created`), or None: a run given by its MLflow id.
        self._shared: object | None = None
        self._step = StepAxis("mlflow")
        run_id = run_id or os.environ.get("MLFLOW_RUN_ID") or None
        experiment_name = experiment_name or os.environ.get("MLFLOW_EXPERIMENT_NAME") or None
        run_name = run_name or os.environ.get("MLFLOW_RUN_NAME") or None
        run_tags = self._named(tags or {})
        if identity is not None:
            run_tags.setdefault(RUN_ID_ATTR, identity.run_id)

        def connect() -> tuple[MlflowClient, str]:
            client = MlflowClient(tracking_uri=self.tracking_uri)
            return client, self._start_run(
                client,
                run_id,
                experiment_name,
                run_name,
                run_tags,
                params,
                artifact_location,
                identity,
            )

        uri = self.tracking_uri or mlflow.get_tracking_uri()
        #: Whether the store can take more (its disk not full); checked before each request.
        self._room = RoomCheck(
            "MLflow's sqlite store",
            MIN_FREE_BYTES,
            "this backend sends MLflow nothing more in this run (the other backends go on)",
        )
        self._db_folder = _sqlite_folder(str(uri))
        try:
            if _is_local(uri):
                self.client, self.run_id = connect()  # a local store: disk work that ends
            else:
                self.client, self.run_id = start_within(
                    connect,
                    connect_timeout_s,
                    f"the MLflow tracking server at {uri}",
                    abandon=_end_abandoned_run,
                )
        except MlflowException as exc:
            # The store's own answer (credentials refused): a condition to fix, said in one
            # line by the Logger, not a plugin's bug with its traceback.
            raise BackendUnavailable(
                f"the MLflow store at {uri} refused to start the run: {first_line(exc)}"
            ) from exc
        except _database_errors() as exc:
            # SQLAlchemy's, under MLflow's database stores: a URL it takes no file from, a
            # file that is not a database, one it cannot open. The store's conditions too.
            advice = _SQLITE_FORMS if type(exc).__name__ == "ArgumentError" else ""
            raise BackendUnavailable(
                f"the MLflow store at {uri} could not be opened: {first_line(exc)}{advice}"
            ) from exc

    def _start_run(
        self,
        client: MlflowClient,
        run_id: str | None,
        experiment_name: str | None,
        run_name: str | None,
        run_tags: dict[str, str],
        params: Mapping[str, Any] | None,
        artifact_location: str | None,
        identity: RunIdentity | None,
    ) -> str:
        """Create (or resume) the run in the store; its id."""
        self.client = client
        experiment_id: str | None = None
        shared: tuple[str, str, str] | None = None
        if run_id is None and identity is not None:
            experiment_id = self._experiment_id(experiment_name, artifact_location)
            shared = (str(client.tracking_uri), experiment_id, identity.run_id)
            if shared in _created:  # another Logger of this process started it: join it
                run_id, self._shared = _created[shared]
            elif identity.resume:
                run_id = self._tagged_run(experiment_id, identity.run_id)
        if run_id is not None:
            self.run_id = client.get_run(run_id).info.run_id
            client.update_run(self.run_id, status=RunStatus.to_string(RunStatus.RUNNING))
            initial_tags = [RunTag(k, v) for k, v in run_tags.items()]
        else:
            if experiment_id is None:
                experiment_id = self._experiment_id(experiment_name, artifact_location)
            run = client.create_run(experiment_id, tags=run_tags, run_name=run_name)
            self.run_id = run.info.run_id
            initial_tags = []
        if shared is not None:
            if self._shared is None:
                self._shared = object()
                _created[shared] = (self.run_id, self._shared)
            _RUNS.join(self._shared, started=True)
        if params:
            self.log_hyperparams(to_hyperparams(params))
        for tag_chunk in _chunks(initial_tags, MAX_PARAMS_TAGS_PER_BATCH):
            client.log_batch(self.run_id, tags=tag_chunk, synchronous=True)
        return self.run_id

    def _tagged_run(self, experiment_id: str, run_id: str) -> str | None:
        """The latest run of the experiment tagged with ``run_id``, to resume; None (said)
        when there is none."""
        if "'" in run_id or "\\" in run_id:
            found = []  # MLflow's filter strings cannot quote these: never a match
        else:
            found = self.client.search_runs(
                [experiment_id],
                filter_string=f"tags.`{RUN_ID_ATTR}` = '{run_id}'",
                order_by=["attributes.start_time DESC"],
                max_results=1,
            )
        if found:
            return str(found[0].info.run_id)
        warn_once(
            "mlflow:resume-not-found",
            f"rlmetrics-mlflow: no run of experiment {experiment_id} is tagged "
            f"{RUN_ID_ATTR}={run_id!r} to resume; a new run is started with that tag",
        )
        return None

    def _experiment_id(self, name: str | None, artifact_location: str | None) -> str:
        if name is None:
            return os.environ.get("MLFLOW_EXPERIMENT_ID") or "0"
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return str(found.experiment_id)
        try:
            return str(self.client.create_experiment(name, artifact_location=artifact_location))
        except MlflowException:
            # Another rank created it between our lookup and create.
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return str(found.experiment_id)

    def _named(self, values: Mapping[str, Any]) -> dict[str, str]:
        out: dict[str, str] = {}
        for key, value in values.items():
            name = self._keys(str(key))
            if name is not None:
                out[name] = param_text(value)
        return out

    def _check_room(self) -> None:
        """Raise :class:`BackendUnavailable` if a sqlite store's disk has (nearly) no room
        left, or refused a write as full: from then on at once, every time. Each refused
        request would be MLflow's ERROR and traceback, and a row that cannot be written."""
        self._room.check(self._db_folder)

    def _request(self, send: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``send(*args, **kwargs)``, after :meth:`_check_room`; sqlite refusing it as full
        breaks the backend as a full disk does."""
        self._check_room()
        try:
            return send(*args, **kwargs)
        except MlflowException as exc:
            if not _disk_full(exc):
                raise
            self._room.broken = (
                f"MLflow's sqlite store in {self._db_folder} is full (sqlite refused a write: "
                "database or disk is full)"
            )
            self._check_room()
            raise

    def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
        # One request per logged dict (split only past MLflow's 1000-metric batch limit).
        self._log_batch(self._metrics(metrics, step, prefix))

    def log_metrics_rows(self, rows: Sequence[tuple[Mapping[str, Any], Any, str]]) -> int:
        """A backlog of logged dicts (:class:`~rlmetrics.backends.TakesRows`) in as few
        requests as MLflow takes: whole dicts, up to its 1000 metrics a request (a request
        costs about the same for one dict or hundreds). How many dicts, from the first, are
        in the store: a request that fails ends it, and the rest are logged one by one."""
        written = pending = 0
        batch: list[Metric] = []
        try:
            for metrics, step, prefix in rows:
                row = self._metrics(metrics, step, prefix)
                if batch and len(batch) + len(row) > MAX_METRICS_PER_BATCH:
                    self._log_batch(batch)
                    written, pending, batch = written + pending, 0, []
                batch.extend(row)
                pending += 1
            self._log_batch(batch)
            return written + pending
        except Exception:
            return written

    def _log_batch(self, metrics: Sequence[Metric]) -> None:
        """``metrics`` in requests of at most MLflow's 1000."""
        for chunk in _chunks(metrics, MAX_METRICS_PER_BATCH):
            self._request(self.client.log_batch, self.run_id, metrics=chunk, synchronous=True)

    def _metrics(self, metrics: Mapping[str, Any], step: Any, prefix: str) -> list[Metric]:
        """A logged dict as MLflow metrics at its trainer step, stamped now."""
        timestamp = int(time.time() * 1000)
        step = self._step(step)  # MLflow needs an integer step
        batch: dict[str, Metric] = {}
        for key, value in metric_values(metrics):
            full = full_key(prefix, key)
            if isinstance(value, Skipped):
                warn_once(
                    f"mlflow:skip:{value.reason}",
                    f"rlmetrics-mlflow: {full!r} is {value.reason}, which MLflow cannot store "
                    "as a metric; it is skipped (the JSONL backend keeps it). Log constant "
                    "text as a tag or param when creating the backend. Later keys skipped for "
                    "this reason are reported at DEBUG",
                )
                continue
            name = self._keys(full)
            # A key the loop logged wins over a list summary (``x/mean`` of a list ``x``)
            # that lands on the same name, whatever their order in the dict.
            if name is None or (name in batch and key not in metrics):
                continue
            batch[name] = Metric(name, value, timestamp, step)
        return list(batch.values())

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """The configuration flattened with ``/`` as run params: keys mapped to names MLflow
        accepts (:mod:`.keys`), values as text cut to MLflow's 6000 characters. MLflow refuses
        to change a param, so a key the run already has keeps its value (a different one is
        said once and skipped) and the rest are logged."""
        existing = self.client.get_run(self.run_id).data.params
        fresh: dict[str, str] = {}
        for key, value in flat_hyperparams(params).items():
            name = self._keys(key)
            if name is None:
                continue
            text = _param_text(value)
            if name not in existing:
                fresh[name] = text
            elif existing[name] != text:
                warn_once(
                    "mlflow:param-changed",
                    f"rlmetrics-mlflow: hyperparameter {name!r} already has another value in "
                    "this MLflow run, and MLflow never changes a param: the first value stays "
                    "(the JSONL and W&B backends have the new one); later ones at DEBUG",
                )
        for chunk in _chunks([Param(k, v) for k, v in fresh.items()], MAX_PARAMS_TAGS_PER_BATCH):
            self._request(self.client.log_batch, self.run_id, params=chunk, synchronous=True)

    def log_samples(self, rows: Sequence[Mapping[str, Any]], step: int, name: str) -> None:
        """The rows as an MLflow table (``log_table``), one artifact per name and step:
        ``<name>/step_<step>.json`` (``rollouts/step_5.json``) with a ``step`` column; the
        run's Evaluation view lists it. A later table of the name at the step is appended to
        it, every cell's type kept (:mod:`.tables`)."""
        self._check_room()
        number = as_step(step)
        columns = columns_of(rows)
        data: dict[str, list[Any]] = {c: [row.get(c) for row in rows] for c in columns}
        data.setdefault("step", [number] * len(rows))
        artifact = f"{_artifact_folder(name)}/step_{'none' if number is None else number}.json"
        # Columns of Python objects: pandas would make a column of ints and floats float64,
        # rounding an int past 2**53 (pandas' JSON writer keeps 10 significant digits of a
        # float whatever the column; docs/trackers.md says so).
        import pandas  # type: ignore[import-untyped]  # (log_table needs it; not at start)

        with WRITING:
            earlier = earlier_table(self.client, self.run_id, artifact)
            if earlier is not None:
                data = appended(earlier, data)
            frame = pandas.DataFrame(data, columns=list(data), dtype=object)
            if earlier is None and listable(self.client, self.run_id, artifact):
                self.client.log_table(self.run_id, data=frame, artifact_file=artifact)
            else:
                if earlier is None:
                    warn_once(
                        "mlflow:tables-unlisted",
                        f"rlmetrics-mlflow: table {artifact!r} and later ones are artifacts "
                        "of the run but not in its list of tables (the run tag "
                        "mlflow.loggedArtifacts, which MLflow keeps to 8000 characters and "
                        "its Evaluation view reads); load_table and the Artifacts view read "
                        "them",
                    )
                replace_table(self.client, self.run_id, frame, artifact)
            remember(self.client, self.run_id, artifact, data)
        rounded = _rounded_floats(frame, data)
        if rounded:
            warn_once(
                "mlflow:table-float-digits",
                f"rlmetrics-mlflow: {len(rounded)} float cells of table {name!r}, first "
                f"{rounded[0]!r}, are stored with fewer digits: MLflow writes tables through "
                "pandas' JSON writer, which keeps 10 significant digits and none past the 10th "
                "decimal place, and NaN and infinities as null (the JSONL backend has them "
                "exactly); later tables at DEBUG",
            )

    def finish(self, failed: bool = False) -> None:
        """Mark the run FINISHED, once; FAILED when ``failed`` (it ended with an exception)."""
        if self._finished:
            return
        self._finished = True
        if self._shared is not None:
            if not _RUNS.leave(self._shared):
                return  # another Logger of the process still logs into the run: it ends it
            # Ended: a Logger of the run made after this is a new attempt, as in a new process.
            for key, (_run_id, token) in list(_created.items()):
                if token is self._shared:
                    del _created[key]
        forget_run(self.client, self.run_id)
        status = RunStatus.FAILED if failed else RunStatus.FINISHED
        try:
            self.client.set_terminated(self.run_id, RunStatus.to_string(status))
        except MlflowException as exc:
            if self._room.broken is None and not _disk_full(exc):
                raise
            raise BackendUnavailable(
                f"the MLflow run could not be marked {RunStatus.to_string(status)}: "
                f"{self._room.broken or first_line(exc)}"
            ) from exc


def _rounded_floats(frame: Any, data: Mapping[str, list[Any]]) -> list[float]:
    """The float cells of ``data`` that ``frame``'s JSON, written as ``log_table`` writes it,
    does not hold exactly (read back with Python's exact parser)."""
    if not any(type(v) is float for column in data.values() for v in column):
        return []
    written = json.loads(frame.to_json(orient="split", index=False, date_format="iso"))["data"]
    return [
        value
        for row, cells in enumerate(zip(*data.values(), strict=True))
        for value, back in zip(cells, written[row], strict=True)
        if type(value) is float and not (type(back) in (int, float) and back == value)
    ]
