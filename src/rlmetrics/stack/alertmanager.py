"""Alert delivery for the stack: Debian's ``prometheus-alertmanager`` on 127.0.0.1, its
configuration routing every alert Prometheus fires to the webhooks the stack was given.

One route, grouped by run id (``rlmetrics_run_id``: one notification carries a run's alerts,
and another run's alerts never wait in its group), to one receiver holding every destination:

- a generic JSON webhook gets Alertmanager's own payload (``version`` 4: ``status``,
  ``groupLabels``, ``alerts`` with their labels and annotations);
- a Slack incoming webhook gets Alertmanager's ``slack_configs`` message: one attachment whose
  title names the status and the run, whose text is each alert's name and summary;
- a Discord webhook gets Alertmanager's ``discord_configs`` message: one embed, the same
  title, the same lines.

Every destination is told when an alert resolves (``send_resolved``). Cluster gossip is off
(``--cluster.listen-address=``): one Alertmanager per stack, and nothing listens beyond
loopback.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from typing import Any

import attrs

from .._yaml import render_yaml
from ..alerts.model import duration
from ..dashboard.promql import RUN_ID_LABEL
from .config import StackFiles, atomic_write
from .server import ServerProcess

__all__ = [
    "ALERTMANAGER_BINARIES",
    "ALERTMANAGER_MISSING",
    "AlertmanagerProcess",
    "Delivery",
    "alertmanager_config",
    "find_alertmanager",
    "write_alertmanager_config",
]

#: The binary's names: Debian's package, then upstream's release.
ALERTMANAGER_BINARIES = ("prometheus-alertmanager", "alertmanager")

ALERTMANAGER_MISSING = (
    "Alertmanager is not installed, so alerts stay in Prometheus and reach no one "
    "(Debian or Ubuntu: sudo apt-get install --no-install-recommends prometheus-alertmanager)"
)

RECEIVER = "rlmetrics"

# The notification's words, shared by Slack and Discord (Alertmanager's Go templates: the data
# is one group of alerts, https://prometheus.io/docs/alerting/latest/notifications/).
_TITLE = (
    '{{ if eq .Status "firing" }}Firing{{ else }}Resolved{{ end }}: run '
    "{{ or .GroupLabels." + RUN_ID_LABEL + ' "(no run id)" }}'
)
_LINES = (
    "{{ range .Alerts }}"
    '{{ if eq .Status "resolved" }}[resolved] {{ end }}'
    "{{ .Labels.alertname }}: {{ .Annotations.summary }}\n"
    "{{ end }}"
)


def _urls(items: Sequence[str]) -> tuple[str, ...]:
    return tuple(items)


@attrs.frozen
class Delivery:
    """Where the stack's alerts go, and how Alertmanager batches them.

    :param webhooks: URLs that get Alertmanager's generic JSON payload.
    :param slack: Slack incoming-webhook URLs (``https://hooks.slack.com/services/...``).
    :param discord: Discord webhook URLs (``https://discord.com/api/webhooks/...``).
    :param group_wait_s: how long a new group waits for more alerts before its first message.
    :param group_interval_s: how long a group waits before telling what changed (a new alert,
        a resolution).
    :param repeat_interval_s: how often a group still firing is told again.
    """

    webhooks: tuple[str, ...] = attrs.field(default=(), converter=_urls)
    slack: tuple[str, ...] = attrs.field(default=(), converter=_urls)
    discord: tuple[str, ...] = attrs.field(default=(), converter=_urls)
    group_wait_s: float = 30.0
    group_interval_s: float = 300.0
    repeat_interval_s: float = 4 * 3600.0

    @property
    def destinations(self) -> dict[str, int]:
        """How many URLs of each kind (the report says this much, never a URL: a Slack or
        Discord webhook URL is its own credential)."""
        return {
            "webhook": len(self.webhooks),
            "slack": len(self.slack),
            "discord": len(self.discord),
        }


def alertmanager_config(delivery: Delivery) -> dict[str, Any]:
    """Alertmanager's configuration document: one route grouped by run id, one receiver."""
    receiver: dict[str, Any] = {"name": RECEIVER}
    if delivery.webhooks:
        receiver["webhook_configs"] = [
            {"url": url, "send_resolved": True} for url in delivery.webhooks
        ]
    if delivery.slack:
        receiver["slack_configs"] = [
            {
                "api_url": url,
                "send_resolved": True,
                "title": _TITLE,
                "text": _LINES,
                "fallback": _TITLE,
                "color": '{{ if eq .Status "firing" }}danger{{ else }}good{{ end }}',
                # Slack formats only these (Alertmanager's default adds "fallback", a field
                # Slack shows as plain text).
                "mrkdwn_in": ["pretext", "text"],
            }
            for url in delivery.slack
        ]
    if delivery.discord:
        receiver["discord_configs"] = [
            {"webhook_url": url, "send_resolved": True, "title": _TITLE, "message": _LINES}
            for url in delivery.discord
        ]
    return {
        "route": {
            "receiver": RECEIVER,
            "group_by": [RUN_ID_LABEL],
            "group_wait": duration(delivery.group_wait_s),
            "group_interval": duration(delivery.group_interval_s),
            "repeat_interval": duration(delivery.repeat_interval_s),
        },
        "receivers": [receiver],
    }


def write_alertmanager_config(files: StackFiles, delivery: Delivery) -> None:
    """Write ``alertmanager.yml`` in the stack's folder, readable by its owner only (a Slack
    or Discord webhook URL is a credential)."""
    atomic_write(
        files.alertmanager_config,
        "# Generated by `rlmetrics stack`: every alert of the stack's Prometheus, grouped by run\n"
        "# id, to the webhooks given (--webhook, --slack, --discord); docs/operations.md.\n"
        + render_yaml(alertmanager_config(delivery)),
    )


def find_alertmanager(path: str | None = None) -> str | None:
    """The Alertmanager binary: ``path`` when given (a name on PATH or a file), else
    Debian's ``prometheus-alertmanager`` or upstream's ``alertmanager`` on PATH; None when
    there is none."""
    if path:
        return shutil.which(path)
    for name in ALERTMANAGER_BINARIES:
        found = shutil.which(name)
        if found is not None:
            return found
    return None


class AlertmanagerProcess(ServerProcess):
    """Alertmanager serving ``alertmanager.yml`` on 127.0.0.1:``port``, its state (silences,
    notification log) in ``alertmanager-data/``, its output in ``alertmanager.log``."""

    name = "alertmanager"

    def command(self) -> list[str]:
        return [
            self.binary,
            f"--config.file={self.files.alertmanager_config.name}",
            f"--web.listen-address={self.address}",
            # A notification's links (externalURL, Slack's title_link) name this address.
            f"--web.external-url={self.url}",
            f"--storage.path={self.files.alertmanager_data.name}",
            # No cluster: its gossip port would listen on every interface.
            "--cluster.listen-address=",
        ]
