"""For any configuration and any sample table, every value a tracker can take arrives exactly,
read back from its real store, and what it cannot take is said once: one property per backend.

Each property writes into one run (a run per example would take minutes): every example is
logged under its own key or table name by the backend itself (what the Logger's worker would
call, with what ``to_hyperparams`` / ``to_samples`` made of the input), and is read back from
the store and compared with what docs/trackers.md says that tracker makes of each value. The
stores are slow, so the examples are few (``_EXAMPLES``) whatever the profile.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from mlflow.tracking import MlflowClient
from swanlab_helpers import config as swanlab_config
from swanlab_helpers import texts as swanlab_texts
from tensorboard_helpers import hparams, texts
from wandb_helpers import read_run

from rlmetrics.backends import available_backends
from rlmetrics.backends.jsonl import read_jsonl, samples_path
from rlmetrics.hyperparams import flat_hyperparams, to_hyperparams
from rlmetrics.identity import RunIdentity
from rlmetrics.redaction import redaction
from rlmetrics.samples import columns_of, markdown_table, to_samples

_EXAMPLES = 12
_OFF = redaction(False)  # a generated key may spell "token": the values are under test here

# Text of any code point, lone surrogates and NUL included; keys never hold "/" (flattening
# would merge "a/b" with {"a": {"b": ...}}, which is flattening's rule, not a tracker's).
_text = st.text(st.characters(exclude_categories=()), max_size=12)
_keys = st.text(st.characters(exclude_characters="/"), min_size=1, max_size=8)
_ints = (
    st.integers()
    | st.integers(2**53, 2**80)
    | st.just(5000).map(lambda digits: 10**digits)
    | st.just(-(2**64))
)
_scalars = st.none() | st.booleans() | _ints | st.floats() | _text
_configs = st.dictionaries(
    _keys,
    st.recursive(
        _scalars | st.lists(_scalars.filter(lambda v: v is not None), max_size=4),
        lambda inner: st.dictionaries(_keys, inner, min_size=1, max_size=3),
        max_leaves=12,
    ),
    min_size=1,
    max_size=6,
)
_columns = st.sampled_from(["prompt", "completion", "reward", "judge", "id"]) | _keys
_rows = st.lists(
    st.dictionaries(_columns, _scalars, min_size=1, max_size=5), min_size=1, max_size=4
)


def _same(got: Any, want: Any) -> bool:
    """Equal, NaN to NaN; a float and an int of the same value are the same number (JSON
    writes 4.5e16 as 45000000000000000)."""
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return float(got) == want or (math.isnan(got) and math.isnan(want))
    if isinstance(want, dict) and isinstance(got, dict):
        return got.keys() == want.keys() and all(_same(got[k], want[k]) for k in want)
    if isinstance(want, list) and isinstance(got, list):
        return len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want, strict=True))
    return type(got) is type(want) and got == want


def _first_difference(got: Any, want: Any, path: str = "") -> str | None:
    """Where ``got`` first differs from ``want`` (for the assertion's message)."""
    if isinstance(want, dict) and isinstance(got, dict):
        if got.keys() != want.keys():
            return f"{path}: keys {sorted(map(repr, got.keys() ^ want.keys()))}"
        for key in want:
            found = _first_difference(got[key], want[key], f"{path}/{key!r}")
            if found:
                return found
        return None
    return None if _same(got, want) else f"{path}: {got!r} != {want!r}"


def _nonfinite_text(value: Any) -> Any:
    """JSON (the JSONL file, W&B's config) has no NaN or infinity: their text."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: _nonfinite_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nonfinite_text(v) for v in value]
    return value


def _wandb_config(value: Any) -> Any:
    if type(value) is int and abs(value) > 2**53:
        return str(value)
    if isinstance(value, dict):
        return {k: _wandb_config(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_wandb_config(v) for v in value]
    return _nonfinite_text(value)


def _tensorboard_hparam(value: Any) -> Any:
    if isinstance(value, (bool, str)):
        return value
    if type(value) is int:
        return float(value) if abs(value) <= 2**53 else str(value)
    if isinstance(value, float):
        return value
    return str(value)


def _as_config_yaml_reads(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` as SwanLab's config.yaml reads it back, entry by entry."""
    import yaml

    out = {}
    for key, value in config.items():
        dumped = yaml.safe_dump(
            {key: {"value": value}}, allow_unicode=True, default_flow_style=False
        )
        ((back_key, back),) = yaml.safe_load(dumped).items()
        out[back_key] = back["value"]
    return out


def _swanlab_config(value: Any) -> Any:
    """SwanLab's config.yaml: NaN and infinities as text, and U+0085 (NEL, a YAML line break)
    read back as a space where it is not quoted (so compared as a space on both sides)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Inf" if value > 0 else "-Inf")
    if isinstance(value, str):
        return value.replace("\x85", " ")
    if isinstance(value, dict):
        return {k.replace("\x85", " "): _swanlab_config(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_swanlab_config(v) for v in value]
    return value


class Store:
    """One backend's run for a property: ``log`` each example, then ``check`` them all."""

    def __init__(self, name: str, tmp_path: Path, migrated_store: Path) -> None:
        self.name = name
        self.tmp_path = tmp_path
        self.uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
        options: dict[str, Any] = {
            "jsonl": {"path": tmp_path / "m.jsonl"},
            "wandb": {"project": "rlmetrics-test", "dir": tmp_path / "wandb"},
            "tensorboard": {"log_dir": tmp_path / "tb"},
        }.get(name, {})
        if name == "mlflow":
            shutil.copyfile(migrated_store, tmp_path / "mlflow.db")
            # An experiment of its own, so artifact_location holds: the store's default
            # experiment keeps MLflow's ./mlruns, which wrote tables into the working folder.
            options = {
                "tracking_uri": self.uri,
                "experiment_name": "values",
                "artifact_location": (tmp_path / "artifacts").as_uri(),
            }
        if name == "swanlab":
            import swanlab

            settings_ = swanlab.Settings(
                terminal={"proxy_type": "none"},
                probe={"monitor": False, "hardware": False, "git": False, "requirements": False},
            )
            options = {
                "project": "rlmetrics-test",
                "mode": "offline",
                "log_dir": tmp_path / "swanlog",
                "init_kwargs": {"settings": settings_},
            }
        factory = available_backends()[name][1]
        self.backend = factory(**options, identity=RunIdentity(f"values-{name}"))

    def finish(self) -> None:
        self.backend.finish()


@pytest.fixture
def store_for(tmp_path: Path, migrated_store: Path) -> Callable[[str], Store]:
    made: list[Store] = []

    def make(name: str) -> Store:
        made.append(Store(name, tmp_path, migrated_store))
        return made[-1]

    return make


_BACKENDS = ["jsonl", "wandb", "mlflow", "tensorboard", "swanlab"]


@pytest.mark.parametrize("name", _BACKENDS)
def test_any_configuration_arrives_exactly_where_the_tracker_can_take_it(
    name: str, store_for: Callable[[str], Store], caplog: pytest.LogCaptureFixture
) -> None:
    store = store_for(name)
    backend = store.backend
    logged: list[dict[str, Any]] = []

    @settings(max_examples=_EXAMPLES)
    @given(config=_configs)
    # A negative infinity, nested: SwanLab wrote it as "Inf" (its otel144 run found this).
    @example(config={"a": {"b": {"w": -math.inf}, "c": [-math.inf, math.inf]}})
    def log(config: dict[str, Any]) -> None:
        params = {f"ex{len(logged)}": to_hyperparams(config, _OFF)}
        logged.append(params)
        if name == "tensorboard":
            # TensorBoard's reader shows a folder's first hparams session only: a folder each.
            folder = store.tmp_path / "tb" / f"ex{len(logged)}"
            writer = available_backends()["tensorboard"][1](log_dir=folder)
            writer.log_hyperparams(params)
            writer.finish()
            flat = flat_hyperparams(params)
            shown = hparams(folder)
            want = {k: _tensorboard_hparam(v) for k, v in flat.items()}
            assert _same({k: shown[k] for k in want}, want)
            return
        backend.log_hyperparams(params)
        if name == "mlflow":
            run = MlflowClient(store.uri).get_run(backend.run_id)
            for key, value in flat_hyperparams(params).items():
                text = (
                    value
                    if isinstance(value, str)
                    else repr(value)
                    if value is None
                    else str(value)
                )
                mapped = backend._keys(key)  # MLflow's key rules: the backend's own name
                assert mapped is None or run.data.params[mapped] == text[:6000]

    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        log()
        store.finish()
    merged = {k: v for params in logged for k, v in params.items()}
    if name == "jsonl":
        rows = read_jsonl(store.tmp_path / "m.jsonl", every_row=True)
        rows = [r for r in rows if r.get("kind") == "hyperparams"]
        got = {k: v for r in rows for k, v in r["hyperparams"].items()}
        assert _same(got, _nonfinite_text(merged))
    if name == "wandb":
        updates = [
            r["config"]["update"]
            for r in read_run(backend.transaction_log).records
            if r["type"] == "config"
        ]
        got = {k: v for u in updates for k, v in u.items() if k.startswith("ex")}
        assert _same(got, _wandb_config(merged)), _first_difference(got, _wandb_config(merged))
        texts_said = [r for r in caplog.records if "W&B's config would round" in r.getMessage()]
        assert len(texts_said) == (1 if _wandb_config(merged) != _nonfinite_text(merged) else 0)
    if name == "swanlab":
        from rlmetrics_swanlab.backend import altered_by_config_yaml

        got = swanlab_config(backend.run_dir)
        # What SwanLab's YAML writer folds (a line break in some keys, NEL) reads back
        # otherwise: compared as the file holds it, and said once.
        altered = altered_by_config_yaml(merged)
        want = _swanlab_config(_as_config_yaml_reads(merged))
        got = _swanlab_config({k: v for k, v in got.items() if k.startswith("ex")})
        assert _same(got, want), _first_difference(got, want)
        said = [r for r in caplog.records if "SwanLab's config.yaml" in r.getMessage()]
        assert len(said) == (1 if altered else 0)
    # Nothing was lost to an exception: no backend call raised (log() would have failed).


@pytest.mark.parametrize("name", _BACKENDS)
def test_any_sample_table_arrives_exactly_where_the_tracker_can_take_it(
    name: str, store_for: Callable[[str], Store], caplog: pytest.LogCaptureFixture
) -> None:
    store = store_for(name)
    backend = store.backend
    tables: list[list[dict[str, Any]]] = []
    rounded = False  # whether MLflow stored some float cell with fewer digits

    @settings(max_examples=_EXAMPLES)
    @given(rows=_rows)
    # The largest floats: 10 significant digits round them past the largest float, so
    # MLflow's table reads back as infinities (its otel144 run found this).
    @example(rows=[{"max": sys.float_info.max, "min": -sys.float_info.max}])
    def log(rows: list[dict[str, Any]]) -> None:
        table = to_samples(rows, redact=_OFF)
        tables.append(table)
        backend.log_samples(table, len(tables), f"t{len(tables)}")

    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        log()
        store.finish()
    for step, table in enumerate(tables, 1):
        tag, columns = f"t{step}", columns_of(table)
        if name == "jsonl":
            got = [
                r["sample"]
                for r in read_jsonl(samples_path(store.tmp_path / "m.jsonl"))
                if r["name"] == tag
            ]
            assert _same(got, _nonfinite_text(table))
        if name == "wandb":
            history = read_run(backend.transaction_log).history
            (row,) = [r for r in history if f"{tag}.path" in r]
            data = json.loads((backend.run_dir / "files" / row[f"{tag}.path"]).read_text())
            assert data["columns"] == columns
            assert _same(data["data"], [[r.get(c) for c in columns] for r in table])
        if name == "mlflow":
            client = MlflowClient(store.uri)
            path = client.download_artifacts(
                backend.run_id, f"{tag}/step_{step}.json", str(store.tmp_path / tag)
            )
            data = json.loads(Path(path).read_text())
            want = [[_mlflow_cell(r.get(c)) for c in columns] + [step] for r in table]
            assert data["columns"][: len(columns)] == columns
            assert _close(data["data"], want)
            rounded = rounded or data["data"] != [
                [r.get(c) for c in columns] + [step] for r in table
            ]
        if name == "tensorboard":
            assert texts(backend.log_dir, tag) == [(step, markdown_table(table, columns))]
        if name == "swanlab":
            got = swanlab_texts(backend.run_dir, tag)
            want = []
            for r in table:
                body = "\n\n".join(f"{c}: {r[c]}" for c in columns if c in r and c != "reward")
                reward = r.get("reward")
                want.append((step, body, None if reward is None else f"reward {reward}"))
            assert got == want
    # What MLflow's table writer rounds (or writes as null) is said, once; nothing else is.
    said = "rlmetrics-mlflow" in caplog.text and "fewer digits" in caplog.text
    assert said == rounded


def _mlflow_cell(value: Any) -> Any:
    """pandas' JSON writer: NaN and infinities as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _close(got: Any, want: Any) -> bool:
    """Equal, floats as pandas' JSON writer keeps them: 10 significant digits, and no digit
    past the 10th decimal place (docs/trackers.md says so)."""
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        if math.isinf(got):  # the largest floats, rounded to 10 digits, read back past them
            return got == float(f"{want:.10g}")
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-10)
    if isinstance(want, list) and isinstance(got, list):
        return len(got) == len(want) and all(_close(g, w) for g, w in zip(got, want, strict=True))
    return type(got) is type(want) and got == want
