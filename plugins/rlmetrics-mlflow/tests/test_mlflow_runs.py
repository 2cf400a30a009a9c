"""Hyperparameters, sample tables and resume, against a real sqlite tracking store read back
with MlflowClient."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient
from mlflow_helpers import history
from rlmetrics_mlflow import MlflowBackend, mlflow_key

import rlmetrics
from rlmetrics.identity import RUN_ID_ATTR, RunIdentity


def _config(tracking_uri: str, tmp_path: Path) -> dict[str, Any]:
    return {
        "tracking_uri": tracking_uri,
        "experiment_name": "grpo",
        "artifact_location": (tmp_path / "artifacts").as_uri(),
    }


def test_hyperparams_become_params_within_mlflows_rules(
    tracking_uri: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    logger = rlmetrics.Logger(backends={"mlflow": _config(tracking_uri, tmp_path)})
    run_id = logger.backends["mlflow"].run_id
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        logger.log_hyperparams(
            {
                "lr": 1e-6,
                "model": {"name": "qwen", "layers": [28, 28]},
                "bad key?": 1,
                "prompt": "x" * 7000,
                "seed": None,
            }
        )
        logger.log_hyperparams({"lr": 5.0, "extra": 1})  # MLflow never changes a param
    logger.finish()

    params = MlflowClient(tracking_uri).get_run(run_id).data.params
    assert params == {
        "lr": "1e-06",
        "model/name": "qwen",
        "model/layers": "[28, 28]",
        mlflow_key("bad key?"): "1",
        "prompt": "x" * 6000,
        "seed": "None",
        "extra": "1",
    }
    assert caplog.text.count("MLflow keeps at most 6000") == 1
    assert "'lr' already has another value" in caplog.text
    assert "is logged to MLflow as" in caplog.text


def test_samples_become_a_table_artifact_per_call(tracking_uri: str, tmp_path: Path) -> None:
    logger = rlmetrics.Logger(backends={"mlflow": _config(tracking_uri, tmp_path)})
    run_id = logger.backends["mlflow"].run_id
    rows = [
        {"prompt": "2+2?", "completion": "4", "reward": 1.0},
        {"prompt": "1+1?", "completion": "3", "reward": 0.0, "judge": "wrong"},
    ]
    logger.log_samples(rows, step=7, name="eval/samples")
    logger.finish()

    client = MlflowClient(tracking_uri)
    path = client.download_artifacts(run_id, "eval/samples/step_7.json", str(tmp_path))
    table = json.loads(Path(path).read_text())
    assert table["columns"] == ["prompt", "completion", "reward", "judge", "step"]
    assert table["data"] == [["2+2?", "4", 1.0, None, 7], ["1+1?", "3", 0.0, "wrong", 7]]
    logged = json.loads(client.get_run(run_id).data.tags["mlflow.loggedArtifacts"])
    assert logged == [{"path": "eval/samples/step_7.json", "type": "table"}]


def test_a_second_table_at_a_step_is_appended_with_every_cell_s_type_kept(
    tracking_uri: str, tmp_path: Path
) -> None:
    # Trajectories finishing one by one at a step append to one table. MLflow's own append
    # reads the table back through pandas: a column one call lacks became float64, so the
    # earlier ints were written 3.0 and an int past 2**53 rounded (1.152921505e+18).
    backend = MlflowBackend(**_config(tracking_uri, tmp_path))
    backend.log_samples([{"prompt": "a", "turns": 3, "seed": 2**60 + 1}], 5, "trajectories")
    backend.log_samples([{"prompt": "b", "turns": 4, "seed": 2**60 + 3}], 5, "trajectories")
    backend.log_samples([{"prompt": "c", "error": "timeout"}], 5, "trajectories")
    backend.finish()

    client = MlflowClient(tracking_uri)
    path = client.download_artifacts(backend.run_id, "trajectories/step_5.json", str(tmp_path))
    table = json.loads(Path(path).read_text())
    assert table["columns"] == ["prompt", "turns", "seed", "step", "error"]
    assert table["data"] == [
        ["a", 3, 2**60 + 1, 5, None],
        ["b", 4, 2**60 + 3, 5, None],
        ["c", None, None, 5, "timeout"],
    ]
    loaded = client.load_table(
        client.get_run(backend.run_id).info.experiment_id,
        "trajectories/step_5.json",
        run_ids=[backend.run_id],
    )
    assert list(loaded["prompt"]) == ["a", "b", "c"]
    logged = json.loads(client.get_run(backend.run_id).data.tags["mlflow.loggedArtifacts"])
    assert logged == [{"path": "trajectories/step_5.json", "type": "table"}]


def test_appending_at_a_step_prints_nothing_and_keeps_every_row(
    tracking_uri: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # Each append read the table back with download_artifacts, whose tqdm bar printed
    # "Downloading artifacts: 100%|...| 1/1" on stderr once per call (a step's trajectories
    # finishing one by one: one bar per trajectory), and whose cost grew with the table.
    backend = MlflowBackend(**_config(tracking_uri, tmp_path))
    other = MlflowBackend(**_config(tracking_uri, tmp_path), run_id=backend.run_id)
    for i in range(6):  # two writers of one run (two Loggers) append to one table in turn
        (backend if i % 2 else other).log_samples([{"i": i, "group_id": 7}], 3, "rollouts")
    backend.log_samples([{"i": 6}], 4, "rollouts")
    backend.log_samples([{"i": 7, "group_id": 7}], 4, "rollouts")
    err = capfd.readouterr().err
    backend.finish()

    assert "Downloading artifacts" not in err
    client = MlflowClient(tracking_uri)
    for step, rows in ((3, [[i, 7, 3] for i in range(6)]), (4, [[6, 4, None], [7, 4, 7]])):
        path = client.download_artifacts(
            backend.run_id, f"rollouts/step_{step}.json", str(tmp_path)
        )
        assert json.loads(Path(path).read_text())["data"] == rows


def test_a_resumed_run_appends_to_its_step_s_table_without_a_progress_bar(
    tracking_uri: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # A resumed run logging its step again reads the earlier process's table back:
    # download_artifacts printed "Downloading artifacts: 100%" on stderr. A store on this
    # disk (file artifacts) is read in place.
    first = MlflowBackend(**_config(tracking_uri, tmp_path))
    first.log_samples([{"i": 0}], 5, "rollouts")
    first.finish()
    resumed = MlflowBackend(**_config(tracking_uri, tmp_path), run_id=first.run_id)
    capfd.readouterr()
    resumed.log_samples([{"i": 1}], 5, "rollouts")
    err = capfd.readouterr().err
    resumed.finish()

    assert "Downloading artifacts" not in err
    client = MlflowClient(tracking_uri)
    path = client.download_artifacts(first.run_id, "rollouts/step_5.json", str(tmp_path))
    assert json.loads(Path(path).read_text())["data"] == [[0, 5], [1, 5]]


def test_tables_past_what_mlflows_table_list_holds_still_land_said_once(
    tracking_uri: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # log_table lists each table in the run tag mlflow.loggedArtifacts, a JSON list MLflow
    # cuts to 8000 characters: past ~150 tables (a table every step) the tag was cut mid-JSON
    # and every later log_table raised JSONDecodeError ("failed in log_samples").
    name = "n" * 200  # ~240 characters a table in the list: it is full after about 33
    logger = rlmetrics.Logger(backends={"mlflow": _config(tracking_uri, tmp_path)})
    run_id = logger.backends["mlflow"].run_id
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        for step in range(40):
            logger.log_samples([{"prompt": "p", "reward": float(step)}], step=step, name=name)
        logger.finish()

    assert "failed" not in caplog.text
    (said,) = [r.getMessage() for r in caplog.records if "mlflow.loggedArtifacts" in r.getMessage()]
    assert f"{name}/step_" in said
    client = MlflowClient(tracking_uri)
    listed = json.loads(client.get_run(run_id).data.tags["mlflow.loggedArtifacts"])
    assert 30 <= len(listed) < 40
    assert listed == [
        {"path": f"{name}/step_{s}.json", "type": "table"} for s in range(len(listed))
    ]
    for step in range(40):
        path = client.download_artifacts(run_id, f"{name}/step_{step}.json", str(tmp_path))
        assert json.loads(Path(path).read_text())["data"] == [["p", float(step), step]]


def test_float_cells_pandas_would_round_are_said_once_and_the_rest_exact(
    tracking_uri: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # log_table writes through pandas' JSON writer, which keeps 10 significant digits and none
    # past the 10th decimal place: such a cell lands rounded, so it must be said, not lost.
    backend = MlflowBackend(**_config(tracking_uri, tmp_path))
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        backend.log_samples([{"reward": 0.5}, {"reward": 0.25}], 1, "exact")
        assert "digits" not in caplog.text
        backend.log_samples(
            [{"reward": 6.103515625e-05}, {"reward": 1e-12}, {"reward": 0.75}], 2, "rounded"
        )
    backend.finish()

    (message,) = [r.getMessage() for r in caplog.records if "digits" in r.getMessage()]
    assert "2 float cells" in message and "'rounded'" in message and "6.103515625e-05" in message
    client = MlflowClient(tracking_uri)
    path = client.download_artifacts(backend.run_id, "exact/step_1.json", str(tmp_path))
    assert json.loads(Path(path).read_text())["data"] == [[0.5, 1], [0.25, 1]]


def test_a_resumed_run_continues_the_mlflow_run_tagged_with_its_id(
    tracking_uri: str, tmp_path: Path
) -> None:
    first = MlflowBackend(**_config(tracking_uri, tmp_path), identity=RunIdentity("grpo-7"))
    for step in range(1, 11):
        first.log_metrics({"loss": float(step)}, step, "train")
    first.finish()
    other = MlflowBackend(**_config(tracking_uri, tmp_path), identity=RunIdentity("grpo-8"))
    other.finish()
    resumed = MlflowBackend(
        **_config(tracking_uri, tmp_path), identity=RunIdentity("grpo-7", resume=True)
    )
    for step in range(11, 21):
        resumed.log_metrics({"loss": float(step)}, step, "train")
    resumed.finish()

    client = MlflowClient(tracking_uri)
    assert resumed.run_id == first.run_id != other.run_id
    assert client.get_run(first.run_id).data.tags[RUN_ID_ATTR] == "grpo-7"
    assert history(client, first.run_id, "train/loss") == [(s, float(s)) for s in range(1, 21)]


def test_a_resumed_run_s_configuration_built_in_another_order_is_the_same_params(
    tracking_uri: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A list of dicts was its str(): the restarted job's config, its stage dicts built in
    # another order, was "already has another value" for a param that had not changed.
    first = MlflowBackend(**_config(tracking_uri, tmp_path), identity=RunIdentity("grpo-9"))
    first.log_hyperparams({"stages": [{"steps": 100, "lr": 1e-6, "opt": {"b": 1, "a": 2}}]})
    first.finish()
    resumed = MlflowBackend(
        **_config(tracking_uri, tmp_path), identity=RunIdentity("grpo-9", resume=True)
    )
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        resumed.log_hyperparams({"stages": [{"opt": {"a": 2, "b": 1}, "lr": 1e-6, "steps": 100}]})
    resumed.finish()

    params = MlflowClient(tracking_uri).get_run(first.run_id).data.params
    assert params == {"stages": "[{'lr': 1e-06, 'opt': {'a': 2, 'b': 1}, 'steps': 100}]"}
    assert "already has another value" not in caplog.text


def test_two_loggers_of_one_run_share_one_mlflow_run(tracking_uri: str, tmp_path: Path) -> None:
    # A trainer callback's Logger and the script's own each created an MLflow run tagged with
    # the one run id: the run split in two (the loss in one, the evaluation in the other), and
    # a later resume=True continued only the newer.
    trainer = rlmetrics.Logger(backends={"mlflow": _config(tracking_uri, tmp_path)})
    script = rlmetrics.Logger(
        backends={"mlflow": _config(tracking_uri, tmp_path)}, run_id=trainer.identity.run_id
    )
    trainer.log_hyperparams({"lr": 1e-6})
    script.log_hyperparams({"seed": 3})
    trainer.log_metrics({"loss": 1.0}, step=1, prefix="train")
    script.log_metrics({"accuracy": 0.5}, step=1, prefix="eval")
    trainer.finish()
    client = MlflowClient(tracking_uri)
    run_id = trainer.backends["mlflow"].run_id
    assert client.get_run(run_id).info.status == "RUNNING"  # the script still logs into it
    script.log_metrics({"accuracy": 0.75}, step=2, prefix="eval")
    script.finish()

    (run,) = client.search_runs([client.get_run(run_id).info.experiment_id])
    assert run.info.run_id == run_id and run.info.status == "FINISHED"
    assert run.data.params == {"lr": "1e-06", "seed": "3"}
    assert history(client, run_id, "train/loss") == [(1, 1.0)]
    assert history(client, run_id, "eval/accuracy") == [(1, 0.5), (2, 0.75)]


def test_resuming_a_run_the_store_has_not_seen_starts_it_and_says_so(
    tracking_uri: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        backend = MlflowBackend(
            **_config(tracking_uri, tmp_path), identity=RunIdentity("it's-new", resume=True)
        )
    backend.finish()
    assert "a new run is started with that tag" in caplog.text
    tags = MlflowClient(tracking_uri).get_run(backend.run_id).data.tags
    assert tags[RUN_ID_ATTR] == "it's-new"
