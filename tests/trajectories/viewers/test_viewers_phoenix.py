"""Arize Phoenix as a trajectory viewer: a demo run exported over rlmetrics' OTLP/HTTP exporter
(``OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf``, Phoenix's ``/v1/traces``) comes back through
Phoenix's own Python client (``phoenix.client.Client``) — every trajectory, its tree of turns,
generations, tool calls and rewards with the same parents, and the GenAI attributes as sent."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlmetrics.testing import wait_until

from ._servers import DemoExport, ServerProcess, export_demo, flat, listening_on


@pytest.fixture(scope="module")
def exported(phoenix_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoExport]:
    run = export_demo(tmp_path_factory.mktemp("phoenix-demo"), phoenix_url)
    try:
        yield run
    finally:
        run.stop()


def _spans(url: str) -> list[dict[str, Any]]:
    from phoenix.client import Client

    client = Client(base_url=url)
    found: list[dict[str, Any]] = []
    for project in client.projects.list():
        found += client.spans.get_spans(project_identifier=project["name"], limit=100_000)
    return found


def _read_back(url: str, exported: DemoExport) -> list[dict[str, Any]]:
    want = len(exported.trajectory_tree())

    def landed() -> list[dict[str, Any]] | None:
        spans = _spans(url)
        tree = [s for s in spans if s["context"]["span_id"] in _ids(exported)]
        return spans if len(tree) >= want else None

    found: list[dict[str, Any]] = wait_until(landed, 300, "Phoenix to hold the run's trajectories")
    return found


def _ids(exported: DemoExport) -> set[str]:
    return {span_id for span_id, _p, _n in exported.trajectory_tree()}


def test_phoenix_returns_every_trajectory_and_its_tree(
    phoenix_url: str, exported: DemoExport
) -> None:
    spans = _read_back(phoenix_url, exported)
    sent = exported.trajectory_tree()
    assert len(exported.trajectories()) == 32 * 2
    got = {
        (s["context"]["span_id"], s.get("parent_id"), s["name"])
        for s in spans
        if s["context"]["span_id"] in _ids(exported)
    }
    assert got == sent
    by_name: dict[str, int] = {}
    for _id, _parent, name in got:
        kind = name.split(" ")[0]
        by_name[kind] = by_name.get(kind, 0) + 1
    assert by_name["invoke_agent"] == 64
    assert {"rl.turn", "chat", "execute_tool", "rl.reward"} <= set(by_name)


def test_phoenix_keeps_the_genai_and_rl_attributes(phoenix_url: str, exported: DemoExport) -> None:
    spans = {s["context"]["span_id"]: s for s in _read_back(phoenix_url, exported)}
    sent = {s.span_id: s for s in exported.traces.spans}
    checked = 0
    for span_id, local in sent.items():
        if span_id not in _ids(exported):
            continue
        attributes = flat(spans[span_id].get("attributes") or {})
        for key in (
            "gen_ai.operation.name",
            "gen_ai.agent.name",
            "gen_ai.request.model",
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.output_tokens",
            "gen_ai.tool.name",
            "rl.sample.id",
            "rl.group.id",
            "rl.env",
            "rl.iteration",
            "rl.trajectory.outcome",
            "rl.reward",
            "rl.turn.index",
        ):
            if key in local.attributes:
                assert attributes.get(key) == local.attributes[key], (local.name, key)
                checked += 1
    assert checked > 64 * 8
    agents = [flat(s.get("attributes") or {}) for s in spans.values()]
    assert sum(a.get("gen_ai.operation.name") == "invoke_agent" for a in agents) == 64


def _documented_read_back() -> str:
    """The arguments of the ``get_spans`` call docs/trajectories.md tells a user to make."""
    page = Path(__file__).parents[3] / "docs" / "trajectories.md"
    found = re.search(r"\.spans\.get_spans\(([^)]*)\)", " ".join(page.read_text().split()))
    assert found, "docs/trajectories.md shows no get_spans call"
    return found.group(1)


def test_the_documented_read_back_returns_every_trajectory(
    phoenix_url: str, exported: DemoExport
) -> None:
    """The docs' call, as written, against a server holding the run: every trajectory span
    comes back (the client's default limit is 100 spans, a demo step makes about 300)."""
    from phoenix.client import Client

    _read_back(phoenix_url, exported)  # the run has landed
    client = Client(base_url=phoenix_url)
    spans = eval(f"client.spans.get_spans({_documented_read_back()})", {"client": client})
    got = {s["context"]["span_id"] for s in spans}
    assert {t.span_id for t in exported.trajectories()} <= got


def test_phoenix_listens_on_loopback_only(phoenix: ServerProcess) -> None:
    """Its UI/API/OTLP-HTTP port and its OTLP/gRPC port (which Phoenix binds to every interface
    unless started as the test starts it) are on 127.0.0.1 and nowhere else."""
    for port in phoenix.ports:
        found = listening_on(port)
        if found is None:
            pytest.skip("no /proc/net tables to read listening sockets from")
        assert found == {"127.0.0.1"}, (port, found)
