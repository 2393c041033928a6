"""Pull consumer: the application asks for messages, commits how far it got, seeks by time.

A producer sends six sensor readings to ``readings`` (round-robin over its four queues). A
:class:`sdk.PullConsumer` of group ``reporting`` subscribes, polls them in a loop (each queue's
messages in queue order) and commits its positions. Three more readings follow and are polled;
then the consumer seeks every queue back to the time just before them (``offsets_for_times``)
and polls exactly those three again. Finally a new consumer of the same group starts where the
group committed, so it receives the three later readings once more: the consumer above polled
them (twice) but never committed them (``auto_commit=False``).

    .venv/bin/python examples/pull_consumer.py [DIR]

``DIR`` (default: a temporary directory, removed afterwards) receives the store (``DIR/store``);
a directory holding a Quiver store from an earlier run is deleted first, any other non-empty
directory is left alone.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from _example import run_example

from sdk import ConsumeFrom, EmbeddedBroker, Message, Producer, PullConsumer, ReceivedMessage

TOPIC = "readings"
GROUP = "reporting"
POLL_TIMEOUT_S = 1.0
WAIT_S = 10.0


def poll_at_least(consumer: PullConsumer, count: int) -> list[ReceivedMessage]:
    """Poll until ``count`` messages arrived (or ``WAIT_S`` passed)."""
    got: list[ReceivedMessage] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < count and time.monotonic() < deadline:
        got.extend(consumer.poll(POLL_TIMEOUT_S))  # [] when nothing arrived in time
    return got


def show(message: ReceivedMessage) -> str:
    return (
        f"     {message.topic}/{message.queue_id} offset {message.queue_offset}  "
        f"body={message.body.decode()}"
    )


def run(data: Path) -> int:
    """Produce, poll, commit, seek by time, resume from the committed offsets."""
    # Small segments (1 MiB commitlog files) keep the example's files small.
    with (
        EmbeddedBroker(
            data / "store", commitlog_file_size=1 << 20, cq_entries_per_file=1000
        ) as broker,
        Producer(broker) as producer,
    ):
        print(f"1. embedded broker over {data / 'store'}/")
        for n in range(1, 7):
            producer.send(Message(TOPIC, f"reading {n}: {20 + n / 10:.1f} C".encode()))
        print(f"2. sent 6 readings to {TOPIC}")

        with PullConsumer(
            broker, GROUP, consume_from=ConsumeFrom.FIRST_OFFSET, auto_commit=False
        ) as consumer:
            consumer.subscribe([TOPIC])
            queues = consumer.assignment()
            ids = [q.queue_id for q in queues]
            print(f"3. pull consumer of group {GROUP!r} subscribed to {TOPIC}, queues {ids}")
            first = poll_at_least(consumer, 6)
            print(f"4. polled {len(first)} messages:")
            for message in sorted(first, key=lambda m: (m.queue_id, m.queue_offset)):
                print(show(message))
            consumer.commit()  # every queue's position, persisted on the broker at once
            committed = {q.queue_id: consumer.committed(q) for q in queues}
            print(f"5. committed (queue -> next offset): {committed}")

            time.sleep(0.02)  # store times are in ms: keep the two rounds apart
            since_ms = time.time_ns() // 1_000_000
            for n in range(7, 10):
                producer.send(Message(TOPIC, f"reading {n}: {20 + n / 10:.1f} C".encode()))
            print(f"6. sent 3 more readings after {since_ms} (ms since the epoch)")

            later = poll_at_least(consumer, 3)
            positions = {q.queue_id: consumer.position(q) for q in queues}
            print(f"7. polled {len(later)} more (not committed); positions now {positions}")

            targets = consumer.offsets_for_times(dict.fromkeys(queues, since_ms))
            for queue, offset in targets.items():
                consumer.seek(queue, offset)  # back to the first reading stored since then
            by_time = poll_at_least(consumer, 3)
            offsets = {q.queue_id: offset for q, offset in targets.items()}
            print(f"8. seek by time to {since_ms}: offsets {offsets}; polled again:")
            for message in by_time:
                print(show(message))

        with PullConsumer(broker, GROUP) as resumed:
            resumed.subscribe([TOPIC])
            again = poll_at_least(resumed, 3)
            starts = sorted(m.body.decode() for m in again)
            print(f"9. a new consumer of {GROUP!r} resumed at the committed offsets and got:")
            print(f"     {starts}")
    print("10. closed the consumers, the producer and the broker")
    ok = len(first) == 6 and len(later) == len(by_time) == len(again) == 3
    ok = ok and sorted(m.body for m in by_time) == sorted(m.body for m in later)
    print(f"pull consumer: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_example(run, default_name="pull-consumer", store="store"))
