"""``rlmetrics stack`` delivering alerts: Debian's Alertmanager started beside Prometheus, the
run's ``RLStepStalled`` delivered to a webhook receiver on 127.0.0.1 when the run pauses and its
resolution when it resumes, as Alertmanager's own JSON, as a Slack message and as a Discord
message, each held to the shape its service documents. Without Alertmanager the stack says so
in one line and runs. Loopback only; every wait is bounded."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import psutil
import pytest
from stack_support import Receiver, Run, Stack
from tools_support import RLMETRICS

import rlmetrics
from rlmetrics.testing import wait_until

RUN_ID = "delivery-test-run"

# Slack incoming webhooks (https://api.slack.com/messaging/webhooks) take a JSON object with
# `text`, `blocks` or `attachments`; Alertmanager's slack_configs sends `attachments`
# (https://prometheus.io/docs/alerting/latest/configuration/#slack_config). A legacy attachment
# (https://api.slack.com/reference/messaging/attachments) needs `fallback`, the plain-text
# summary shown where formatting is not; `color` is good, warning, danger or a hex colour;
# `mrkdwn_in` names the fields Slack formats (pretext, text, fields).
SLACK_MESSAGE = {
    "type": "object",
    "anyOf": [{"required": ["text"]}, {"required": ["blocks"]}, {"required": ["attachments"]}],
    "properties": {
        "text": {"type": "string"},
        "channel": {"type": "string"},
        "username": {"type": "string"},
        "icon_emoji": {"type": "string"},
        "icon_url": {"type": "string"},
        "link_names": {"type": "boolean"},
        "attachments": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["fallback"],
                "properties": {
                    "fallback": {"type": "string", "minLength": 1},
                    "color": {
                        "type": "string",
                        "pattern": "^(good|warning|danger|#[0-9A-Fa-f]{6})$",
                    },
                    "title": {"type": "string"},
                    "title_link": {"type": "string", "pattern": "^https?://"},
                    "text": {"type": "string"},
                    "pretext": {"type": "string"},
                    "footer": {"type": "string", "maxLength": 300},
                    "mrkdwn_in": {
                        "type": "array",
                        "items": {"enum": ["pretext", "text", "fields"]},
                    },
                },
            },
        },
    },
}

# Discord's Execute Webhook (https://discord.com/developers/docs/resources/webhook#execute-webhook):
# one of `content` (at most 2000 characters), `embeds` (at most 10) or a file; an embed's
# limits (https://discord.com/developers/docs/resources/message#embed-object-embed-limits):
# title 256 characters, description 4096, 25 fields of name 256 and value 1024; `color` an
# integer. Alertmanager's discord_configs sends one embed per message
# (https://prometheus.io/docs/alerting/latest/configuration/#discord_config).
DISCORD_MESSAGE = {
    "type": "object",
    "anyOf": [
        {"required": ["content"], "properties": {"content": {"minLength": 1}}},
        {"required": ["embeds"], "properties": {"embeds": {"minItems": 1}}},
    ],
    "properties": {
        "content": {"type": "string", "maxLength": 2000},
        "username": {"type": "string"},
        "avatar_url": {"type": "string"},
        "tts": {"type": "boolean"},
        "embeds": {
            "type": "array",
            "maxItems": 10,
            "items": {
                "type": "object",
                "properties": {
                    "title": {"type": "string", "maxLength": 256},
                    "description": {"type": "string", "maxLength": 4096},
                    "color": {"type": "integer", "minimum": 0, "maximum": 0xFFFFFF},
                    "fields": {
                        "type": ["array", "null"],
                        "maxItems": 25,
                        "items": {
                            "type": "object",
                            "required": ["name", "value"],
                            "properties": {
                                "name": {"type": "string", "maxLength": 256},
                                "value": {"type": "string", "maxLength": 1024},
                            },
                        },
                    },
                },
            },
        },
    },
}

# Alertmanager's webhook payload, version 4
# (https://prometheus.io/docs/alerting/latest/configuration/#webhook_config).
WEBHOOK_MESSAGE = {
    "type": "object",
    "required": [
        "version",
        "groupKey",
        "status",
        "receiver",
        "groupLabels",
        "commonLabels",
        "commonAnnotations",
        "externalURL",
        "alerts",
    ],
    "properties": {
        "version": {"const": "4"},
        "status": {"enum": ["firing", "resolved"]},
        "groupLabels": {"type": "object"},
        "alerts": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["status", "labels", "annotations", "startsAt", "endsAt"],
                "properties": {"status": {"enum": ["firing", "resolved"]}},
            },
        },
    },
}


def _stalled(body: dict[str, Any], status: str) -> dict[str, Any] | None:
    """The RLStepStalled alert of ``status`` in a webhook body, if there is one."""
    for alert in body["alerts"]:
        if alert["labels"]["alertname"] == "RLStepStalled" and alert["status"] == status:
            return dict(alert)
    return None


def _slack_text(body: dict[str, Any]) -> str:
    return " ".join(f"{a.get('title', '')} {a.get('text', '')}" for a in body["attachments"])


def _discord_text(body: dict[str, Any]) -> str:
    return " ".join(f"{e.get('title', '')} {e.get('description', '')}" for e in body["embeds"])


def test_a_stall_reaches_every_webhook_and_so_does_its_resolution(
    prometheus_binary: str,
    alertmanager_binary: str,
    stacks: list[Stack],
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    with (
        rlmetrics.start(run_id=RUN_ID, exporters=["prometheus"], prometheus_port=0) as handle,
        Run(interval_s=0.1) as run,
    ):
        assert handle.prometheus_address is not None
        endpoint = f"127.0.0.1:{handle.prometheus_address[1]}"
        stack = Stack(
            *("--dir", str(tmp_path / "stack"), "--run", endpoint, "--no-ray"),
            *("--port", "0", "--alertmanager-port", "0", "--scrape-interval", "1s"),
            # The stall rule in seconds (as test_tools_stack fires it), batched in seconds.
            *("--for", "2s", "--set", "stall.min_s=3"),
            *("--group-wait", "1s", "--group-interval", "1s", "--repeat-interval", "1h"),
            *("--webhook", f"{receiver.url}/webhook", "--slack", f"{receiver.url}/slack"),
            *("--discord", f"{receiver.url}/discord"),
            *("--prometheus", prometheus_binary, "--alertmanager", alertmanager_binary),
        )
        stacks.append(stack)
        manager = stack.report["alertmanager"]
        assert manager["url"].startswith("http://127.0.0.1:")
        assert stack.report["delivery"] == {"webhook": 1, "slack": 1, "discord": 1}
        assert (tmp_path / "stack" / "alertmanager.yml").stat().st_mode & 0o077 == 0
        # Prometheus found its Alertmanager.
        wait_until(
            lambda: stack.get("/api/v1/alertmanagers")["activeAlertmanagers"], 30, "Alertmanager"
        )
        wait_until(
            lambda: stack.query("rl_step_interval_median_seconds"), 30, "the median step interval"
        )
        assert receiver.received == []

        run.running.clear()  # the run pauses
        firing = wait_until(
            lambda: [a for b in receiver.bodies("/webhook") if (a := _stalled(b, "firing"))],
            60,
            "RLStepStalled at the webhook",
        )[0]
        assert firing["labels"]["rlmetrics_run_id"] == RUN_ID
        assert firing["labels"]["severity"] == "page"
        summary = firing["annotations"]["summary"]
        assert re.fullmatch(
            rf"Run {RUN_ID} \(127\.0\.0\.1:\d+\) has logged no step for .+", summary
        ), summary
        body = next(b for b in receiver.bodies("/webhook") if _stalled(b, "firing"))
        jsonschema.validate(body, WEBHOOK_MESSAGE)
        assert body["groupLabels"] == {"rlmetrics_run_id": RUN_ID}  # grouped by run
        # Its links lead to the stack's servers on loopback.
        assert body["externalURL"] == manager["url"]
        assert firing["generatorURL"].startswith(f"{stack.url}/graph?")
        # The same notification, shaped for Slack and Discord.
        slack = wait_until(lambda: receiver.bodies("/slack"), 30, "the Slack message")[0]
        jsonschema.validate(slack, SLACK_MESSAGE)
        assert f"Firing: run {RUN_ID}" in _slack_text(slack)
        assert f"RLStepStalled: Run {RUN_ID} (" in _slack_text(slack)
        assert slack["attachments"][0]["color"] == "danger"
        assert slack["attachments"][0]["title_link"].startswith(manager["url"])
        discord = wait_until(lambda: receiver.bodies("/discord"), 30, "the Discord message")[0]
        jsonschema.validate(discord, DISCORD_MESSAGE)
        assert f"Firing: run {RUN_ID}" in _discord_text(discord)
        assert f"RLStepStalled: Run {RUN_ID} (" in _discord_text(discord)

        run.running.set()  # the run resumes
        resolved = wait_until(
            lambda: [a for b in receiver.bodies("/webhook") if (a := _stalled(b, "resolved"))],
            60,
            "the resolution at the webhook",
        )[0]
        assert resolved["labels"]["rlmetrics_run_id"] == RUN_ID
        assert resolved["endsAt"] > resolved["startsAt"]
        slack_resolved = wait_until(
            lambda: [b for b in receiver.bodies("/slack") if "Resolved: run" in _slack_text(b)],
            30,
            "the resolution on Slack",
        )[0]
        jsonschema.validate(slack_resolved, SLACK_MESSAGE)
        assert slack_resolved["attachments"][0]["color"] == "good"
        assert f"[resolved] RLStepStalled: Run {RUN_ID}" in _slack_text(slack_resolved)
        discord_resolved = wait_until(
            lambda: [b for b in receiver.bodies("/discord") if "Resolved: run" in _discord_text(b)],
            30,
            "the resolution on Discord",
        )[0]
        jsonschema.validate(discord_resolved, DISCORD_MESSAGE)
        assert f"[resolved] RLStepStalled: Run {RUN_ID}" in _discord_text(discord_resolved)

    # Stopped with the stack: both servers.
    pids = [stack.report["prometheus"]["pid"], manager["pid"]]
    status, err = stack.stop()
    assert status == 0, err
    assert "Traceback" not in err
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_without_alertmanager_the_stack_says_so_in_one_line_and_runs(
    prometheus_binary: str, stacks: list[Stack], tmp_path: Path
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    stack = Stack(
        *("--dir", str(tmp_path / "stack"), "--run", "127.0.0.1:9", "--no-ray", "--port", "0"),
        *("--slack", "https://hooks.slack.com/services/T0/B0/x", "--prometheus", prometheus_binary),
        env={**os.environ, "PATH": str(empty)},
        search_path=True,
    )
    stacks.append(stack)
    assert stack.report["alertmanager"] is None and stack.report["delivery"] is None
    assert stack.get("/api/v1/alertmanagers")["activeAlertmanagers"] == []
    assert "alerting" not in (tmp_path / "stack" / "prometheus.yml").read_text()
    assert not (tmp_path / "stack" / "alertmanager.yml").exists()
    status, err = stack.stop()
    assert status == 0
    said = [line for line in err.splitlines() if "lertmanager" in line]
    assert said == [
        "rlmetrics stack: Alertmanager is not installed, so alerts stay in Prometheus and reach "
        "no one (Debian or Ubuntu: sudo apt-get install --no-install-recommends "
        "prometheus-alertmanager)"
    ]
    assert err.strip() == said[0]


def test_no_start_writes_an_alertmanager_configuration_amtool_accepts(
    alertmanager_binary: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [
            RLMETRICS,
            *("stack", "--dir", str(tmp_path / "stack"), "--no-start", "--no-ray", "--json"),
            *("--webhook", "http://127.0.0.1:9/hook", "--slack", "https://hooks.slack.com/x"),
            *("--discord", "https://discord.com/api/webhooks/1/x", "--group-wait", "10s"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["delivery"] == {"webhook": 1, "slack": 1, "discord": 1}
    assert "--cluster.listen-address=" in report["start_all"][0]
    assert "--web.listen-address=127.0.0.1:9093" in report["start_all"][0]
    root = tmp_path / "stack"
    assert '"127.0.0.1:9093"' in (root / "prometheus.yml").read_text()
    amtool = Path(alertmanager_binary).with_name("amtool")
    if not amtool.exists():
        pytest.skip("no amtool beside the Alertmanager binary")
    checked = subprocess.run(
        [str(amtool), "check-config", "alertmanager.yml"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout and "1 receivers" in checked.stdout


def test_a_webhook_that_is_not_a_url_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [RLMETRICS, "stack", "--dir", str(tmp_path / "s"), "--no-start", "--slack", "hooks.x"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "'hooks.x' is not an http:// or https:// URL" in done.stderr
    assert not (tmp_path / "s").exists()


def test_alertmanager_s_usual_port_taken_it_takes_a_free_one_and_prometheus_is_told(
    prometheus_binary: str, alertmanager_binary: str, stacks: list[Stack], tmp_path: Path
) -> None:
    with socket.socket() as holder:
        try:
            # Over a TIME_WAIT an earlier Alertmanager left, as Alertmanager itself would.
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            holder.bind(("127.0.0.1", 9093))
            holder.listen()
        except OSError:
            pass  # something else holds it already: taken either way
        stack = Stack(
            *("--dir", str(tmp_path / "stack"), "--run", "127.0.0.1:9", "--no-ray"),
            *("--port", "0", "--prometheus", prometheus_binary),
            *("--alertmanager", alertmanager_binary),
        )
        stacks.append(stack)
        url = stack.report["alertmanager"]["url"]
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":9093")
        assert stack.report["delivery"] == {"webhook": 0, "slack": 0, "discord": 0}
        told = wait_until(
            lambda: stack.get("/api/v1/alertmanagers")["activeAlertmanagers"], 30, "Alertmanager"
        )
        assert [a["url"] for a in told] == [f"{url}/api/v2/alerts"]
    assert stack.stop()[0] == 0
