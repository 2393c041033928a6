"""Producer stamps: a batch sent again (a producer's own retry, after its transport gave up)
carries its first stamp, so the broker stores it once; any other batch gets the next number."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sdk import EmbeddedBroker, Message
from sdk.outgoing import MessageBuilder
from sdk.transport.http_common import REMEMBERED_BATCHES, Stamper
from sdk.transport.models import ProducerStamp


def _batch(builder: MessageBuilder, queue_id: int = 0, size: int = 3) -> Any:
    return builder.build_batch([Message("orders", b"x") for _ in range(size)], queue_id)


def test_a_batch_sent_again_keeps_its_stamp() -> None:
    builder = MessageBuilder()
    stamper = Stamper("app-1")
    first, second = _batch(builder), _batch(builder)
    assert stamper.stamp(first) == ProducerStamp(stamper.producer_id, 0)
    assert stamper.stamp(second) == ProducerStamp(stamper.producer_id, 1)
    assert stamper.stamp(first) == ProducerStamp(stamper.producer_id, 0)
    assert stamper.stamp(_batch(builder, queue_id=1)) == ProducerStamp(stamper.producer_id, 0)


def test_the_memory_of_batches_is_bounded() -> None:
    builder = MessageBuilder()
    stamper = Stamper("app-1")
    oldest = _batch(builder)
    stamper.stamp(oldest)
    for _ in range(REMEMBERED_BATCHES):
        stamper.stamp(_batch(builder))
    again = stamper.stamp(oldest)
    assert again == ProducerStamp(stamper.producer_id, REMEMBERED_BATCHES + 1)


def test_a_resent_batch_is_stored_once(tmp_path: Path) -> None:
    """The broker's side of the same rule: the stamp the transport gives again is answered
    from the broker's window."""
    builder = MessageBuilder()
    stamper = Stamper("app-1")
    batch = _batch(builder)
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as broker:
        first = broker.service.send(batch, stamp=stamper.stamp(batch))
        again = broker.service.send(batch, stamp=stamper.stamp(batch))
        assert again.phys_offsets == first.phys_offsets
        assert broker.service.max_offset("orders", 0) == 3


def test_an_encoded_batch_sent_again_under_its_stamp_is_stored_once(tmp_path: Path) -> None:
    """A produce body encoded by the caller (the Spark sink's), sent over HTTP under the
    caller's stamp: stored as its messages, and a copy sent again is answered from the
    broker's window."""
    from sdk.protocol.produce_body import encode_produce_body
    from sdk.transport.http_sync import HttpTransport
    from sdk.transport.models import PullBatch, QueuePull, decode_records
    from tests.sdk.remote.loopback_server import loopback_server

    builder = MessageBuilder()
    batch = builder.build_batch([Message("orders", b"m%d" % i) for i in range(3)], 1)
    body = encode_produce_body(batch)
    stamp = ProducerStamp("spark.write.0.0", 5)
    with (
        EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as broker,
        loopback_server(broker) as server,
        HttpTransport(server.url) as transport,
    ):
        first = transport.send_encoded("orders", 1, body, 3, stamp)
        again = transport.send_encoded("orders", 1, body, 3, stamp)
        assert first.stored and len(first.phys_offsets) == 3
        assert again.phys_offsets == first.phys_offsets
        assert broker.service.max_offset("orders", 1) == 3
        pulled = broker.service.pull(PullBatch("g", (QueuePull("orders", 1, 0),)))
        (queue,) = pulled.results
        assert [m.body for m in decode_records(queue.raw)] == [b"m0", b"m1", b"m2"]
