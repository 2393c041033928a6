"""A lite pull consumer that lets a queue go gives its lease back even when the broker refused
the queue's final commit; that commit must then be forgotten, not sent again with a later one:
by then the queue's new owner commits it, and the late commit would move the group back (its
next owner would consume again everything in between)."""

from __future__ import annotations

from pathlib import Path

from offsetstore import MessageQueue
from sdk import ConsumeFrom, EmbeddedBroker, Message, Producer, PullConsumer
from sdk.transport.resolve import resolve

from .refusing import CommitsRefused

TOPIC = "LetGo"
GROUP = "g"


def poll_until(consumer: PullConsumer, done: object, polls: int = 300) -> None:
    for _ in range(polls):
        if done():  # type: ignore[operator]
            return
        consumer.poll(0.1)
    raise AssertionError("not reached within the polls allowed")


def test_a_refused_final_commit_is_not_sent_after_the_queue_was_let_go(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as broker:
        transport = CommitsRefused(resolve(broker))
        with PullConsumer(transport, GROUP, consume_from=ConsumeFrom.FIRST_OFFSET) as first:
            first.subscribe([TOPIC])
            first.poll(0)
            queues = first.assignment()
            with Producer(broker) as producer:
                for queue in queues:
                    producer.send(Message(TOPIC, b"old"), queue_id=queue.queue_id)
            got: list[object] = []
            poll_until(first, lambda: len(got) >= len(queues) or got.extend(first.poll(0.1)))
            with PullConsumer(broker, GROUP, consume_from=ConsumeFrom.FIRST_OFFSET) as second:
                second.subscribe([TOPIC])
                second.poll(0)  # joins: the first member lets some queues go
                transport.refusing = True
                poll_until(first, lambda: len(first.assignment()) < len(queues))
                transport.refusing = False
                let_go = sorted(set(queues) - set(first.assignment()))
                poll_until(second, lambda: set(let_go) <= set(second.assignment()))
                with Producer(broker) as producer:
                    for queue in let_go:
                        producer.send(Message(TOPIC, b"new"), queue_id=queue.queue_id)
                poll_until(second, lambda: _caught_up(second, let_go))
                second.commit()
                first.commit()  # sends what it still has to
                for queue in let_go:  # what the broker holds: not moved back to 1
                    assert broker.service.query_offset(GROUP, TOPIC, queue.queue_id) == 2


def _caught_up(consumer: PullConsumer, queues: list[MessageQueue]) -> bool:
    return all(consumer.position(queue) == 2 for queue in queues)
