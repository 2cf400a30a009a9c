"""Install rlmetrics as users will: from built wheels into a fresh virtualenv.

Every distribution of this repository (the core, each plugins/* folder, and the downstream
example examples/acme-plugin built by setuptools) is built into a wheelhouse; a new venv gets
them with no package index at all, then ``rlmetrics[...]`` with every extra resolves its
third-party dependencies from the index while our names are already satisfied from the
wheelhouse. The installed ``rlmetrics plugins --json`` must list every plugin as loaded, and the
downstream example's family, backend and exporter must work.

Slow (it builds and installs everything), so it runs in the tox env ``wheels`` (in CI), which
sets ``RLMETRICS_WHEELHOUSE_TEST=1``; elsewhere it skips.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="reads pyproject.toml with Python 3.11's tomllib")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "acme-plugin"

pytestmark = pytest.mark.skipif(
    os.environ.get("RLMETRICS_WHEELHOUSE_TEST") != "1",
    reason="builds and installs every distribution; run by the tox env `wheels`",
)


def _distributions() -> list[Path]:
    plugins = sorted(p.parent for p in (ROOT / "plugins").glob("*/pyproject.toml"))
    return [ROOT, *plugins, EXAMPLE]


def _run(*args: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=900, cwd=cwd
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _extras() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return sorted(project["optional-dependencies"])


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    uv = shutil.which("uv")
    assert uv, "the wheels env installs uv"
    work = tmp_path_factory.mktemp("wheelhouse")
    wheelhouse = work / "wheels"
    for source in _distributions():
        _run(uv, "build", "--wheel", "--out-dir", wheelhouse, source)
    built = sorted(wheelhouse.glob("*.whl"))
    assert len(built) == len(_distributions())
    venv = work / "venv"
    _run(uv, "venv", "--python", sys.executable, venv)
    python = venv / "bin" / "python"
    # Our names come from the wheelhouse, with no index to find them anywhere else...
    _run(uv, "pip", "install", "--python", python, "--no-index", "--no-deps", *built)
    # ...then every extra's third-party dependencies from the index.
    extras = ",".join(_extras())
    _run(
        uv,
        "pip",
        "install",
        "--python",
        python,
        "--find-links",
        wheelhouse,
        f"rlmetrics[{extras}]",
        "acme-rlmetrics",
    )
    _run(uv, "pip", "check", "--python", python)
    return venv


def _entry_point_names(source: Path) -> set[str]:
    project = tomllib.loads((source / "pyproject.toml").read_text())["project"]
    return set(project.get("entry-points", {}).get("rlmetrics", {}))


def test_every_plugin_of_every_distribution_loads(venv: Path) -> None:
    listed = json.loads(_run(venv / "bin" / "rlmetrics", "plugins", "--json"))
    status = {row["name"]: (row["status"], row["distribution"]) for row in listed}
    for source in _distributions():
        for name in _entry_point_names(source):
            assert status.get(name, ("missing",))[0] == "loaded", (name, status.get(name))
    assert status["acme_queue"] == ("loaded", "acme-rlmetrics")


def test_the_downstream_example_family_backend_and_exporter_work(
    venv: Path, tmp_path: Path
) -> None:
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path

        import rlmetrics
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from rlmetrics.testing import points

        out = Path(sys.argv[1])
        reader = InMemoryMetricReader()
        telemetry = rlmetrics.start(
            readers=[reader],
            exporters={"acme_lines": {"path": str(out / "lines.txt")}},
            export_interval_s=60,
        )
        logger = rlmetrics.Logger(backends={"acme_tsv": {"path": str(out / "rows.tsv")}})
        logger.log_metrics({"acme/queue_depth": 3, "acme/dropped_batches": 2}, step=5,
                           prefix="train")
        found = {(p.name, p.value) for p in points(reader)}
        assert ("acme.queue.depth", 3) in found and ("acme.batches.dropped", 2) in found, found
        logger.finish()
        telemetry.shutdown()
        """
    )
    _run(venv / "bin" / "python", "-c", script, tmp_path)
    assert (tmp_path / "rows.tsv").read_text().splitlines() == [
        "5\ttrain/acme/queue_depth\t3",
        "5\ttrain/acme/dropped_batches\t2",
    ]
    lines = (tmp_path / "lines.txt").read_text()
    assert "acme.queue.depth{acme.queue.name=replay} 3" in lines
    assert "acme.batches.dropped{acme.queue.name=replay} 2" in lines


def test_the_testing_snippet_of_writing_a_plugin_runs_as_written(venv: Path) -> None:
    text = (ROOT / "docs" / "writing-a-plugin.md").read_text()
    section = text.split("## Testing it", 1)[1]
    snippet = section.split("```python\n", 1)[1].split("```", 1)[0]
    runner = snippet + textwrap.dedent(
        """
        ran = [name for name in list(globals()) if name.startswith("test_")]
        for name in ran:
            globals()[name]()
        print(ran)
        """
    )
    assert _run(venv / "bin" / "python", "-c", runner).strip() == "['test_depth_is_teed']"
