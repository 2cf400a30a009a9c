"""The tracker plugins declare their options (issue 32): a wrong type, or a name the backend
does not take, is a configuration mistake naming its source, refused before the tracker
starts, from the call and the variable."""

from __future__ import annotations

import importlib
import inspect

import pytest

import rlmetrics
from rlmetrics.configuration import declared_options

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


#: (backend, plugin module, a misspelt option, the option meant)
MISSPELT = [
    ("wandb", "rlmetrics_wandb.plugin", "projct", "project"),
    ("mlflow", "rlmetrics_mlflow.plugin", "tracking_urii", "tracking_uri"),
    ("tensorboard", "rlmetrics_tensorboard.plugin", "log_dirr", "log_dir"),
    ("swanlab", "rlmetrics_swanlab.plugin", "projct", "project"),
    ("trackio", "rlmetrics_trackio.plugin", "projct", "project"),
]


@pytest.mark.parametrize(("backend", "module", "misspelt", "meant"), MISSPELT)
def test_a_misspelt_tracker_option_is_refused_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, backend: str, module: str, misspelt: str, meant: str
) -> None:
    """A misspelt option is a mistake to fix now: before, each tracker was started without
    it, failed on the unexpected keyword and was skipped with a warning, and the run went on
    without that tracker."""
    importlib.import_module(module)
    with pytest.raises(
        rlmetrics.ConfigurationError,
        match=f"backend '{backend}' has no option '{misspelt}' \\(did you mean '{meant}'\\?\\)",
    ):
        rlmetrics.Logger(backends={backend: {misspelt: "x"}})
    monkeypatch.setenv("RLMETRICS_BACKENDS", backend)
    variable = f"RLMETRICS_BACKEND_{backend.upper()}_{misspelt.upper()}"
    monkeypatch.setenv(variable, "x")
    with pytest.raises(rlmetrics.ConfigurationError, match=f"from {variable}"):
        rlmetrics.Logger()


@pytest.mark.parametrize("module", sorted({case[1] for case in MISSPELT}))
def test_a_tracker_declares_every_option_its_backend_takes(module: str) -> None:
    """The declared options are the factory's whole set (it takes ``**options`` so that the
    tracker is imported only when asked for), so they must be the backend's parameters."""
    plugin = importlib.import_module(module)
    backend_module = importlib.import_module(module.replace(".plugin", ".backend"))
    (backend,) = [
        value
        for name, value in vars(backend_module).items()
        if name.endswith("Backend")
        and inspect.isclass(value)
        and value.__module__ == backend_module.__name__
    ]
    taken = set(inspect.signature(backend).parameters) - {"identity"}
    assert set(declared_options(plugin.make_backend)) == taken
