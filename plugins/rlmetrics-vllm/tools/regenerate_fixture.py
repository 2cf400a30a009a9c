"""Write vLLM's real ``/metrics`` exposition for the installed vLLM into the test fixtures.

Run it in the ``vllm`` tox env after moving that env to a new vLLM release::

    tox exec -e vllm -- python plugins/rlmetrics-vllm/tools/regenerate_fixture.py \\
        [--also ../shared/fixtures]

It builds vLLM's own ``PrometheusStatLogger`` for a tiny Llama config (no weights, no
tokenizer, nothing downloaded) exactly as an engine does at start, and writes the ``vllm:``
families of ``prometheus_client.REGISTRY`` (no request served yet) to
``tests/fixtures/vllm-<version>-metrics.txt``, and to each ``--also`` folder. The ``vllm`` env's
``test_the_fixture_is_what_this_vllm_exposes`` fails until the installed version has one.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"

__all__ = ["main", "regenerate"]


def regenerate(folders: list[Path]) -> list[Path]:
    """Write the installed vLLM's exposition into each folder; returns the files written."""
    sys.path.insert(0, str(TESTS))
    import vllm_real

    vllm = vllm_real.require_vllm()
    with tempfile.TemporaryDirectory() as model_dir:
        config = vllm_real.vllm_config(vllm_real.write_tiny_config(Path(model_dir)))
        vllm_real.stat_logger(config)
        text = vllm_real.vllm_exposition()
        vllm_real.remove_vllm_metrics()
    written = []
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / vllm_real.fixture_name(vllm.__version__)
        path.write_text(text)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--also",
        type=Path,
        action="append",
        default=[],
        metavar="FOLDER",
        help="another folder to write the same file to (e.g. shared/fixtures); repeatable",
    )
    args = parser.parse_args(argv)
    for path in regenerate([TESTS / "fixtures", *args.also]):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
