"""The tracker plugins declare their options' types (issue 32): a wrong type is a configuration
mistake naming its source, refused before the tracker starts, from the call and the variable."""

from __future__ import annotations

import importlib

import pytest

import rlmetrics

#: (backend, plugin module, option, a value of the wrong type)
CASES = [
    ("wandb", "rlmetrics_wandb.plugin", "tags", "not-a-list"),
    ("mlflow", "rlmetrics_mlflow.plugin", "tags", "not-a-table"),
    ("tensorboard", "rlmetrics_tensorboard.plugin", "flush_secs", "soon"),
    ("swanlab", "rlmetrics_swanlab.plugin", "tags", "not-a-list"),
]


@pytest.mark.parametrize(("backend", "module", "option", "wrong"), CASES)
def test_a_tracker_option_of_the_wrong_type_names_its_source(
    monkeypatch: pytest.MonkeyPatch, backend: str, module: str, option: str, wrong: str
) -> None:
    importlib.import_module(module)  # the tracker plugin is installed in this env
    with pytest.raises(
        rlmetrics.ConfigurationError, match=f"backend '{backend}' option '{option}'"
    ):
        rlmetrics.Logger(backends={backend: {option: wrong}})
    monkeypatch.setenv("RLMETRICS_BACKENDS", backend)
    variable = f"RLMETRICS_BACKEND_{backend.upper()}_{option.upper()}"
    monkeypatch.setenv(variable, wrong)
    with pytest.raises(rlmetrics.ConfigurationError, match=f"from {variable}"):
        rlmetrics.Logger()
