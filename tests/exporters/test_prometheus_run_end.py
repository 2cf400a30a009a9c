"""The Prometheus endpoint says when its run ended: ``rlmetrics_run_ended`` is 0 while the run
goes and 1 once it ended cleanly, served to one last scrape before the endpoint goes (a pull
endpoint that is gone otherwise looks the same whether its process died or its run finished).
The end waits for that scrape only where something scraped the endpoint, and a run that ends
by an exception never says it ended."""

from __future__ import annotations

import re
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import rlmetrics
from rlmetrics.telemetry import _ended_cleanly
from rlmetrics.testing import run_to_exit, wait_until


def _scrape(address: tuple[str, int], prometheus: bool = True) -> str | None:
    """The endpoint's exposition, scraped as Prometheus does (its scrape-timeout header) or
    as a one-off request; None once it is gone."""
    request = urllib.request.Request(f"http://{address[0]}:{address[1]}/metrics")
    if prometheus:
        request.add_header("X-Prometheus-Scrape-Timeout-Seconds", "5")
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return str(r.read().decode())
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


class Scraper:
    """A scraper of the endpoint, every 0.1 s until it is gone, keeping what it read."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self.bodies: list[str] = []
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        stop = threading.Event()
        for _ in range(3000):  # bounded: 5 minutes at most
            body = _scrape(self.address)
            if body is None:
                return
            self.bodies.append(body)
            stop.wait(0.1)

    def join(self) -> None:
        self.thread.join(60)
        assert not self.thread.is_alive()


def test_a_clean_end_is_served_to_a_last_scrape_with_the_run_s_last_values() -> None:
    handle = rlmetrics.start(run_id="ends", exporters=["prometheus"], prometheus_port=0)
    address = handle.prometheus_address
    assert address is not None
    logger = rlmetrics.Logger(backends={})
    logger.log_metrics({"reward": 0.5}, step=1, prefix="train")
    scraper = Scraper(address)
    wait_until(lambda: len(scraper.bodies) >= 3, 60, "three scrapes")
    assert "rlmetrics_run_ended 0.0" in scraper.bodies[0]
    # Logged after the newest scrape, before the end: only a last scrape can take it.
    logger.log_metrics({"reward": 0.75}, step=2, prefix="train")
    logger.finish()
    handle.shutdown()
    scraper.join()
    last = scraper.bodies[-1]
    assert "rlmetrics_run_ended 1.0" in last
    assert re.search(r"^rl_step_number\{[^}]*\} 2\.0$", last, re.MULTILINE), last
    assert sum("rlmetrics_run_ended 1.0" in body for body in scraper.bodies) >= 1


def test_an_endpoint_no_prometheus_scraped_ends_without_waiting() -> None:
    handle = rlmetrics.start(
        run_id="unscraped",
        exporters={"prometheus": {"port": 0, "final_scrape_s": 3600}},
    )
    assert handle.prometheus_address is not None
    # A one-off request (curl, a script reading its own endpoint) is no scraper to wait for.
    assert "rlmetrics_run_ended 0.0" in (_scrape(handle.prometheus_address, False) or "")
    done = threading.Event()
    threading.Thread(target=lambda: (handle.shutdown(), done.set()), daemon=True).start()
    # Bounded far below the option's hour: it does not wait for a scrape nothing would make.
    assert done.wait(60), "shutdown waited for a scrape of an endpoint nothing scraped"


def test_a_run_ended_by_an_exception_never_says_it_ended() -> None:
    scraper: Scraper | None = None
    with (
        pytest.raises(ValueError, match="the loop broke"),
        rlmetrics.start(run_id="fails", exporters=["prometheus"], prometheus_port=0) as h,
    ):
        assert h.prometheus_address is not None
        scraper = Scraper(h.prometheus_address)
        wait_until(lambda: len(scraper.bodies) >= 2, 60, "two scrapes")  # type: ignore[union-attr]
        raise ValueError("the loop broke")
    assert scraper is not None
    scraper.join()
    assert not any("rlmetrics_run_ended 1.0" in body for body in scraper.bodies)


@pytest.mark.parametrize(
    ("exc", "clean"),
    [
        (None, True),
        (KeyboardInterrupt(), True),
        (SystemExit(0), True),
        (SystemExit(None), True),
        (SystemExit(3), False),
        (SystemExit("message"), False),
        (ValueError("x"), False),
    ],
)
def test_which_ends_are_clean(exc: BaseException | None, clean: bool) -> None:
    assert _ended_cleanly(exc) is clean


_EXIT_SCRIPT = """
import os, signal, sys, threading, time, types, urllib.request
import rlmetrics

how, out = sys.argv[1:3]
telemetry = rlmetrics.start(run_id="exits", exporters=["prometheus"], prometheus_port=0)


def on_sigterm(signum, frame):
    # docs/troubleshooting.md's handler: telemetry shut down within the grace period, told
    # that the run failed (a preemption), or not told (the run's end, as shutdown() says).
    if how == "sigterm-shutdown-failed":
        telemetry.shutdown(failed=True, timeout_s=20)
    elif how == "sigterm-shutdown":
        telemetry.shutdown(timeout_s=20)
    sys.exit(143)


signal.signal(signal.SIGTERM, on_sigterm)
host, port = telemetry.prometheus_address


def scrape():
    # Prometheus' own scrape (its timeout header), until the endpoint is gone; each body's
    # end marker noted on a line of its own.
    url = f"http://{host}:{port}/metrics"
    for _ in range(6000):
        request = urllib.request.Request(url, headers={"X-Prometheus-Scrape-Timeout-Seconds": "5"})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                body = response.read().decode()
        except OSError:
            return
        with open(out, "a") as f:
            f.write("ended\\n" if "rlmetrics_run_ended 1.0" in body else "running\\n")
        time.sleep(0.05)


threading.Thread(target=scrape, daemon=True).start()
for _ in range(6000):  # the first scrape, so the end waits for a last one
    if os.path.exists(out):
        break
    time.sleep(0.01)
if how == "notebook":
    # What a Jupyter kernel holds after a cell that raised and was shown, the user going on:
    # IPython's shell, and the error in sys.last_value (sys.last_exc from 3.12).
    ipython = types.ModuleType("IPython")
    ipython.get_ipython = lambda: object()
    sys.modules["IPython"] = ipython
    try:
        1 / 0
    except ZeroDivisionError as error:
        sys.last_type, sys.last_value, sys.last_traceback = type(error), error, error.__traceback__
        sys.last_exc = error
elif how == "exit":
    sys.exit(3)
elif how == "caught-exit":  # a wrapper's try: main() except SystemExit, the script going on
    try:
        sys.exit(3)
    except SystemExit:
        pass
elif how == "raise":
    raise RuntimeError("the loop died")
elif how.startswith("sigterm"):
    print("ready", flush=True)
    while True:
        time.sleep(0.01)
"""

#: How the script ends: its status, and whether the endpoint says the run ended.
_EXITS = {
    "end": (0, True),
    "notebook": (0, True),
    "exit": (3, False),
    "caught-exit": (0, True),
    "raise": (1, False),
    "sigterm": (143, False),
    "sigterm-shutdown-failed": (143, False),
    "sigterm-shutdown": (143, True),
}


@pytest.mark.parametrize("how", sorted(_EXITS))
def test_the_end_served_at_exit_follows_how_the_process_ends(how: str, tmp_path: Path) -> None:
    # A notebook's earlier error (sys.last_value, long gone) made a run that went on and
    # finished count as failed: its end was never served and RLMetricsEndpointDown paged.
    # sys.exit(3) and a SIGTERM handler's sys.exit(143) were a clean end here while the
    # trackers (and a with block) count them as failed. A SIGTERM handler that shut
    # telemetry down itself could only publish a clean end: shutdown(failed=True) now says a
    # preempted run failed, as Logger.finish(failed=True) does. A sys.exit(3) the script
    # caught and went on from kept the run from ever serving its end.
    out = tmp_path / "scrapes.txt"
    status, err = run_to_exit(
        _EXIT_SCRIPT, (how, str(out)), sigterm_when_ready=how.startswith("sigterm"), timeout_s=120
    )
    expected_status, ended = _EXITS[how]
    assert status == expected_status, err
    scrapes = out.read_text().split()
    assert scrapes[0] == "running", err
    assert ("ended" in scrapes) is ended, (scrapes[-3:], err)


def test_a_shutdown_told_the_run_failed_never_says_it_ended(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # What a SIGTERM handler passes by mistake (the signal number) is said once, and the run
    # ends as failed: the endpoint never serves the end, as for shutdown(failed=True).
    handle = rlmetrics.start(run_id="told", exporters=["prometheus"], prometheus_port=0)
    assert handle.prometheus_address is not None
    scraper = Scraper(handle.prometheus_address)
    wait_until(lambda: len(scraper.bodies) >= 2, 60, "two scrapes")
    handle.shutdown(failed=15)  # type: ignore[arg-type]
    scraper.join()
    assert not any("rlmetrics_run_ended 1.0" in body for body in scraper.bodies)
    assert "shutdown()'s failed must be True or False, got an int" in caplog.text
