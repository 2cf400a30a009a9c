"""The tracker plugins declare their options (issue 32): a wrong type, or a name the backend
does not take, is a configuration mistake naming its source, refused before the tracker
starts, from the call and the variable."""

from __future__ import annotations

import importlib
import inspect
import re
import typing

import pytest

import rlmetrics
from rlmetrics.configuration import declared_options


def _misspelt(option: str, meant: str) -> str:
    return f"has no option '{option}' (did you mean '{meant}'?)"


#: (backend, plugin module, option, its value, what the mistake says). The misspelt ones were
#: not refused before: each tracker was started without the option, failed on the unexpected
#: keyword and was skipped with a warning, and the run went on without that tracker.
CASES = [
    ("wandb", "rlmetrics_wandb.plugin", "tags", "not-a-list", "option 'tags'"),
    ("mlflow", "rlmetrics_mlflow.plugin", "tags", "not-a-table", "option 'tags'"),
    ("tensorboard", "rlmetrics_tensorboard.plugin", "flush_secs", "soon", "option 'flush_secs'"),
    ("swanlab", "rlmetrics_swanlab.plugin", "tags", "not-a-list", "option 'tags'"),
    # A misspelt mode: before, the tracker refused it at start with a traceback and the run
    # went on without the tracker.
    ("wandb", "rlmetrics_wandb.plugin", "mode", "onlin", "option 'mode' must be one of"),
    ("swanlab", "rlmetrics_swanlab.plugin", "mode", "onlin", "option 'mode' must be one of"),
    *[
        (backend, f"rlmetrics_{backend}.plugin", misspelt, "x", _misspelt(misspelt, meant))
        for backend, misspelt, meant in [
            ("wandb", "projct", "project"),
            ("mlflow", "tracking_urii", "tracking_uri"),
            ("tensorboard", "log_dirr", "log_dir"),
            ("swanlab", "projct", "project"),
            ("trackio", "projct", "project"),
        ]
    ],
]


@pytest.mark.parametrize(("backend", "module", "option", "value", "said"), CASES)
def test_a_tracker_option_mistake_is_refused_naming_its_source(
    monkeypatch: pytest.MonkeyPatch, backend: str, module: str, option: str, value: str, said: str
) -> None:
    importlib.import_module(module)  # the tracker plugin is installed in this env
    with pytest.raises(
        rlmetrics.ConfigurationError, match=re.escape(f"backend '{backend}' {said}")
    ):
        rlmetrics.Logger(backends={backend: {option: value}})
    monkeypatch.setenv("RLMETRICS_BACKENDS", backend)
    variable = f"RLMETRICS_BACKEND_{backend.upper()}_{option.upper()}"
    monkeypatch.setenv(variable, value)
    with pytest.raises(rlmetrics.ConfigurationError, match=f"from {variable}"):
        rlmetrics.Logger()


@pytest.mark.parametrize("module", sorted({case[1] for case in CASES}))
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


def test_the_declared_modes_are_the_trackers_own() -> None:
    """The plugins name the modes without importing the tracker; these are the tracker's."""
    import swanlab.sdk.internal.settings as swanlab_settings
    import wandb
    from rlmetrics_swanlab.plugin import MODES as SWANLAB_MODES
    from rlmetrics_wandb.plugin import MODES as WANDB_MODES

    assert set(WANDB_MODES) == set(typing.get_args(wandb.Settings.model_fields["mode"].annotation))
    # SwanLab also takes "cloud" for "online" (its settings' validator).
    assert set(SWANLAB_MODES) == {*typing.get_args(swanlab_settings.ModeType), "cloud"}


@pytest.mark.parametrize(
    ("backend", "variable"), [("wandb", "WANDB_MODE"), ("swanlab", "SWANLAB_MODE")]
)
def test_a_tracker_s_own_mode_variable_misspelt_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, backend: str, variable: str
) -> None:
    """Before: the tracker refused ``WANDB_MODE=ofline`` at start with a traceback (a
    pydantic validation error), and the run went on without the tracker, as the option's
    misspelling did before it was checked. The tracker reads its variable whatever the
    option says (a given ``mode="offline"`` fails the same), so it is checked either way."""
    importlib.import_module(f"rlmetrics_{backend}.plugin")
    monkeypatch.setenv(variable, "ofline")
    for backends in ({backend: {}}, backend, {backend: {"mode": "offline"}}):
        with pytest.raises(rlmetrics.ConfigurationError) as raised:
            rlmetrics.Logger(backends=backends)
        message = str(raised.value)
        assert message.startswith(f"backend '{backend}' option 'mode' must be one of"), message
        assert message.endswith(f"(from {variable}='ofline')"), message
