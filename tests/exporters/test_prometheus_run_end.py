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

import pytest

import rlmetrics
from rlmetrics.telemetry import _ended_cleanly
from rlmetrics.testing import wait_until


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
