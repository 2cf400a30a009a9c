"""A run that ends is not a run that died: ``RLMetricsEndpointDown`` end to end. Two training
processes export to their own Prometheus endpoints; ``rlmetrics stack`` (Debian's Prometheus,
the generated rules, Debian's Alertmanager) scrapes both and delivers to a webhook receiver on
127.0.0.1. One run finishes cleanly — its endpoint serves ``rlmetrics_run_ended`` 1 to a last
scrape before it goes — and must not page; the other is killed (SIGKILL) and must. Loopback
only; every wait is bounded."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stack_support import Receiver, Stack

from rlmetrics.testing import wait_until

# A training loop in a process of its own: its endpoint's port on the first line of stdout,
# a step every 0.1 s, and a clean end (telemetry shut down at exit) when stdin closes.
_TRAINER = textwrap.dedent(
    """
    import sys, threading
    import rlmetrics

    rlmetrics.start(run_id=sys.argv[1], exporters=["prometheus"], prometheus_port=0)
    print(rlmetrics.current().prometheus_address[1], flush=True)
    logger = rlmetrics.Logger(backends={})
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    step = 0
    while not done.wait(0.1):
        step += 1
        logger.log_metrics({"reward": step / 100}, step=step, prefix="train")
    logger.finish()
    """
)


class Trainer:
    """:data:`_TRAINER` running as run ``run_id``."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.process = subprocess.Popen(
            [sys.executable, "-c", _TRAINER, run_id],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.strip().isdigit():
            _out, err = self.process.communicate(timeout=30)
            raise AssertionError(f"the trainer did not start: {line}{err}")
        self.address = f"127.0.0.1:{int(line)}"

    def finish(self) -> str:
        """End the run cleanly; its stderr."""
        _out, err = self.process.communicate("", timeout=120)
        assert self.process.returncode == 0, err
        return err

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.communicate(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.kill()


@pytest.fixture
def trainers() -> Iterator[list[Trainer]]:
    started: list[Trainer] = []
    yield started
    for trainer in started:
        trainer.stop()


def _endpoint_down(receiver: Receiver) -> list[dict[str, Any]]:
    return [
        alert
        for body in receiver.bodies("/webhook")
        for alert in body["alerts"]
        if alert["labels"]["alertname"] == "RLMetricsEndpointDown"
    ]


def test_a_run_that_finishes_does_not_page_and_one_that_is_killed_does(
    prometheus_binary: str,
    alertmanager_binary: str,
    stacks: list[Stack],
    trainers: list[Trainer],
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    finished, killed = Trainer("run-that-finishes"), Trainer("run-that-is-killed")
    trainers += [finished, killed]
    stack = Stack(
        *("--dir", str(tmp_path / "stack"), "--no-ray", "--port", "0"),
        *("--run", finished.address, "--run", killed.address),
        *("--alertmanager-port", "0", "--scrape-interval", "1s", "--for", "2s"),
        *("--group-wait", "1s", "--group-interval", "1s", "--repeat-interval", "1h"),
        *("--webhook", f"{receiver.url}/webhook"),
        *("--prometheus", prometheus_binary, "--alertmanager", alertmanager_binary),
    )
    stacks.append(stack)
    wait_until(
        lambda: stack.get("/api/v1/alertmanagers")["activeAlertmanagers"], 60, "Alertmanager"
    )
    # Both runs scraped, each saying it has not ended.
    running = 'rlmetrics_run_ended == 0 and on(job, instance) target_info{rlmetrics_run_id!=""}'
    wait_until(lambda: len(stack.query(running)) == 2, 60, "both runs' endpoints scraped")

    said = finished.finish()
    assert "Traceback" not in said, said
    killed.kill()

    # The killed run pages, with its run id.
    paged = wait_until(lambda: _endpoint_down(receiver), 120, "RLMetricsEndpointDown delivered")
    assert {a["labels"]["rlmetrics_run_id"] for a in paged} == {killed.run_id}, paged
    assert paged[0]["labels"]["instance"] == killed.address
    assert paged[0]["labels"]["severity"] == "page"
    assert killed.run_id in paged[0]["annotations"]["summary"]

    # The finished run's last scrape took its end; it has been down for longer than the
    # alert's for: (2 s) over several evaluations, and no alert of it is pending or firing.
    ended = stack.query(f'last_over_time(rlmetrics_run_ended{{instance="{finished.address}"}}[5m])')
    assert [float(s["value"][1]) for s in ended] == [1.0]
    wait_until(
        lambda: stack.query(f'max_over_time(up{{instance="{finished.address}"}}[8s]) == 0'),
        60,
        "the finished run down for 8 s",
    )
    alerts = [
        a
        for a in stack.get("/api/v1/alerts")["alerts"]
        if a["labels"]["alertname"] == "RLMetricsEndpointDown"
    ]
    assert {a["labels"]["instance"] for a in alerts} == {killed.address}, alerts
    assert {a["labels"]["rlmetrics_run_id"] for a in _endpoint_down(receiver)} == {killed.run_id}
