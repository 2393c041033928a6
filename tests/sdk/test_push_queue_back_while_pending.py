"""A queue given back to a push member while it still holds the queue's lease for a commit that
has not landed is consumed again.

Letting a queue go commits its offset and only then gives the lease back: when the commit
fails, the member forgets the queue's state but keeps its lease (the next settle sends the
commit again). If the group gives the queue back to it meanwhile, the member owns the queue
again: it must take it up (from its own commit, still waiting to land), not hold its lease
forever without pulling it, which would leave the queue unconsumed by the whole group.
"""

from __future__ import annotations

from pathlib import Path

from sdk import ConsumeFrom, EmbeddedBroker, Message, Producer
from sdk.consumer.membership import MessageModel
from sdk.consumer.push_core import PushCore, PushSettings
from sdk.message import retry_topic
from sdk.transport.resolve import resolve
from sdk.transport.steps import run_steps

from .refusing import CommitsRefused

TOPIC = "Back"
GROUP = "g"


def test_a_queue_given_back_before_its_commit_landed_is_consumed_again(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as broker:
        real = resolve(broker)
        transport = CommitsRefused(real)
        settings = PushSettings(consume_from=ConsumeFrom.FIRST_OFFSET)
        # "client-2" sorts after "client-1": while that one is a member, queue 0 is its.
        core = PushCore(real.broker_name, GROUP, "client-2", {TOPIC: None}, settings)
        with Producer(broker) as producer:
            for i in range(3):
                producer.send(Message(TOPIC, f"m{i}".encode()), queue_id=0)
        try:
            run_steps(core.rebalance(), transport)  # type: ignore[arg-type]
            queue = next(q for q in core.states if (q.topic, q.queue_id) == (TOPIC, 0))
            batch = core.next_pull(0)
            for work_queue, process_queue, messages in core.on_pulled(batch, real.pull(batch)):
                state = core.try_start(work_queue, process_queue, messages)
                assert state is not None
                core.complete(work_queue, state, messages)
            subscription = {TOPIC: "*", retry_topic(GROUP): "*"}
            real.heartbeat(GROUP, "client-1", subscription, MessageModel.CLUSTERING.value)
            run_steps(core.rebalance(), transport)  # type: ignore[arg-type]
            transport.refusing = True
            run_steps(core.settle(), transport)  # type: ignore[arg-type]
            assert queue not in core.states and queue in core.offsets.pending()  # lease kept
            transport.refusing = False
            real.unregister(GROUP, "client-1")  # the group gives the queue back
            run_steps(core.rebalance(), transport)  # type: ignore[arg-type]
            assert queue in core.states
            assert core.states[queue].next_offset == 3  # from its own commit
            with Producer(broker) as producer:
                producer.send(Message(TOPIC, b"after"), queue_id=0)
            batch = core.next_pull(0)
            works = core.on_pulled(batch, real.pull(batch))
            assert [m.body for q, _, ms in works if q == queue for m in ms] == [b"after"]
        finally:
            run_steps(core.shutdown(), transport)  # type: ignore[arg-type]
