"""A push consumer's pull answer is taken only by the queue state it was asked for.

The lease keeper's thread may release a queue and take it again (from the group's committed
offset) while a long poll is out. The answer then describes records read from where the queue
no longer is: taken, it would skip the records between the two offsets (or deliver some
twice). The core ignores it, as the pull consumer does; the next pull asks again.
"""

from __future__ import annotations

from pathlib import Path

from sdk import ConsumeFrom, EmbeddedBroker, Message, Producer
from sdk.consumer.push_core import PushCore, PushSettings
from sdk.transport.resolve import resolve
from sdk.transport.steps import run_steps

TOPIC = "Stale"


def test_an_answer_for_an_offset_the_queue_left_is_ignored(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as broker:
        with Producer(broker) as producer:
            for i in range(10):
                producer.send(Message(TOPIC, f"m{i}".encode()), queue_id=0)
        settings = PushSettings(consume_from=ConsumeFrom.FIRST_OFFSET)
        transport = resolve(broker)
        core = PushCore(transport.broker_name, "g", "client-1", {TOPIC: None}, settings)
        try:
            run_steps(core.rebalance(), transport)
            queue = next(q for q in core.states if (q.topic, q.queue_id) == (TOPIC, 0))
            state = core.states[queue]
            state.next_offset = 4  # the queue had consumed up to 4 when the pull went out
            batch = core.next_pull(0)
            result = transport.pull(batch)
            # Meanwhile it was let go and taken again from the group's committed offset, 0.
            state.next_offset = 0
            assert core.on_pulled(batch, result) == []
            assert state.next_offset == 0  # the next pull asks again from where the queue is
            batch = core.next_pull(0)
            works = core.on_pulled(batch, transport.pull(batch))
            delivered = [m.queue_offset for work in works if work[0] == queue for m in work[2]]
            assert delivered == list(range(10))  # nothing in [0, 4) was skipped
        finally:
            run_steps(core.shutdown(), transport)
