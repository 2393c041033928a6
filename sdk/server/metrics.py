"""The broker server's counters, and ``GET /metrics`` in Prometheus' text format (0.0.4).

Counters only grow, from the server's start; a rate is the scraper's ``rate()`` over them:

* ``quiver_put_messages_total`` / ``quiver_put_bytes_total``: messages stored by sends, and the
  bytes of their produce bodies;
* ``quiver_get_messages_total`` / ``quiver_get_bytes_total``: records and record bytes handed
  out by pulls;
* ``quiver_requests_total{route, status}``: answered requests;
* ``quiver_commitlog_flush_seconds`` (a summary: ``_sum``, ``_count``): the commitlog's fsyncs;

and gauges read at the scrape: ``quiver_open_connections``, ``quiver_parked_pulls`` (long
polls in flight: pulls that asked to wait, held now or being answered),
``quiver_consumer_lag{group, topic, queue_id}`` (messages behind, per queue a group has offsets
of).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from sdk.transport.admin_models import QueueLag

__all__ = ["ServerMetrics", "render"]


@dataclass
class ServerMetrics:
    """What the server counts; updated on its event loop only (no lock needed)."""

    put_messages: int = 0
    put_bytes: int = 0
    get_messages: int = 0
    get_bytes: int = 0
    parked_pulls: int = 0
    requests: Counter[tuple[str, int]] = field(default_factory=Counter)

    def answered(self, route: str, status: int) -> None:
        self.requests[(route, status)] += 1


@dataclass(frozen=True)
class Gauges:
    """What the scrape reads besides the counters."""

    open_connections: int
    flush_seconds_sum: float
    flush_count: int
    lag: Iterable[tuple[str, QueueLag]]  # (group, one queue's lag)


def _label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(metrics: ServerMetrics, gauges: Gauges) -> str:
    """The Prometheus text exposition of ``metrics`` and ``gauges``."""
    lines: list[str] = []

    def family(name: str, kind: str, text: str) -> None:
        lines.append(f"# HELP {name} {text}")
        lines.append(f"# TYPE {name} {kind}")

    family("quiver_put_messages_total", "counter", "Messages stored by sends.")
    lines.append(f"quiver_put_messages_total {metrics.put_messages}")
    family("quiver_put_bytes_total", "counter", "Produce body bytes of the stored sends.")
    lines.append(f"quiver_put_bytes_total {metrics.put_bytes}")
    family("quiver_get_messages_total", "counter", "Records handed out by pulls.")
    lines.append(f"quiver_get_messages_total {metrics.get_messages}")
    family("quiver_get_bytes_total", "counter", "Record bytes handed out by pulls.")
    lines.append(f"quiver_get_bytes_total {metrics.get_bytes}")
    family("quiver_requests_total", "counter", "Answered requests by route and HTTP status.")
    for (route, status), count in sorted(metrics.requests.items()):
        lines.append(f'quiver_requests_total{{route="{_label(route)}",status="{status}"}} {count}')
    family("quiver_commitlog_flush_seconds", "summary", "Time the commitlog's fsyncs took.")
    lines.append(f"quiver_commitlog_flush_seconds_sum {gauges.flush_seconds_sum:.6f}")
    lines.append(f"quiver_commitlog_flush_seconds_count {gauges.flush_count}")
    family("quiver_open_connections", "gauge", "Client connections open now.")
    lines.append(f"quiver_open_connections {gauges.open_connections}")
    family("quiver_parked_pulls", "gauge", "Pulls in flight that asked to wait (long polls).")
    lines.append(f"quiver_parked_pulls {metrics.parked_pulls}")
    family("quiver_consumer_lag", "gauge", "Messages a group has yet to consume, per queue.")
    for group, lag in gauges.lag:
        labels = f'group="{_label(group)}",topic="{_label(lag.topic)}",queue_id="{lag.queue_id}"'
        lines.append(f"quiver_consumer_lag{{{labels}}} {lag.lag}")
    return "\n".join(lines) + "\n"
