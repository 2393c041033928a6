"""Group rebalance under load: members join and leave (1 -> 3 -> 2 -> 4) while a producer keeps
sending; no queue is ever consumed by two members at once and no message is left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdk.consumer import ownership
from sdk.perf.rebalance_bench import RebalanceBenchConfig, run_rebalance_scenario
from sdk.perf.report import Progress

pytestmark = pytest.mark.integration


def scenario(tmp_path: Path) -> dict[str, float]:
    config = RebalanceBenchConfig(
        tmp_path, queues=16, sizes=(1, 3, 2, 4), rate_msgs_per_s=1500,
        commitlog_file_size=4 * 1024 * 1024,
    )  # fmt: skip
    return run_rebalance_scenario(config, Progress(enabled=False))


def test_membership_changes_never_overlap_and_lose_nothing(tmp_path: Path):
    figures = scenario(tmp_path)
    assert figures["rebalance_changes"] == 5  # 1->2->3, 3->2, 2->3->4
    assert figures["rebalance_overlaps"] == 0
    assert figures["rebalance_lost"] == 0


def test_the_overlap_count_sees_consumers_that_ignore_leases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Without leases (RocketMQ's concurrent consumers) a revoked queue is let go at once and
    the new owner starts while the old one still consumes: the scenario must count that."""
    original = ownership.QueueOwnership.__init__

    def unleased(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        kwargs["leased"] = False
        original(self, *args, **kwargs)

    monkeypatch.setattr(ownership.QueueOwnership, "__init__", unleased)
    monkeypatch.setattr(  # and let a revoked queue go at once, listeners running or not
        ownership.QueueOwnership, "release_timed_out", lambda self, queue: queue in self.releasing
    )
    assert scenario(tmp_path)["rebalance_overlaps"] > 0
