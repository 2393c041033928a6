"""An event-loop transaction fetch parked on the broker whose loop is gone (stopped and closed
with the fetch still pending) must not break the broker: closing it answers the other waiters
and stops its check thread as usual. Waking a parked fetch schedules a callback on its loop,
which a closed loop refuses."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sdk import EmbeddedBroker


def test_a_fetch_left_on_a_closed_loop_does_not_break_closing_the_broker(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20)
    transactions = broker.service.transactions
    loop = asyncio.new_event_loop()
    parked = loop.create_task(transactions.fetch_checks_async("producers", "client-1", 60_000))
    loop.run_until_complete(asyncio.sleep(0))  # the fetch parks its future on the broker
    assert not parked.done()
    loop.close()  # abandoned: the task is never cancelled nor finished
    broker.close()  # wakes every parked fetch
    assert broker.service.closed
