"""PushConsumer.run() returns only once a close made elsewhere has finished.

A listener (or another thread) that closes the consumer ends run()'s wait at the start of that
close; run() must not return while the close still waits for listener calls and has not yet
persisted the offsets (a script that exits next would lose them and leave the group to expire).
The listener here closes its own consumer, so the close waits ``release_timeout_s`` for it.
"""

from __future__ import annotations

from pathlib import Path

from sdk import ConsumeFrom, ConsumeResult, EmbeddedBroker, Message, Producer, PushConsumer

TOPIC = "RunClosedElsewhere"


def test_run_returns_after_a_close_by_a_listener_has_committed(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as broker:
        with Producer(broker) as producer:
            for i in range(6):
                producer.send(Message(TOPIC, f"m{i}".encode()), queue_id=0)
        consumer: PushConsumer

        def listener(messages):
            if messages[0].body == b"m3":
                consumer.close()  # waits release_timeout_s for this very call
            return ConsumeResult.SUCCESS

        consumer = PushConsumer(
            broker, "g", {TOPIC: None}, listener, consume_threads=1,
            consume_from=ConsumeFrom.FIRST_OFFSET, release_timeout_s=0.5,
        )  # fmt: skip
        consumer.run()
        # m0..m2 were consumed and committed; the close persisted them before run() returned
        assert broker.service.query_offset("g", TOPIC, 0) == 3
