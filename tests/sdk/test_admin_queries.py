"""Queries of stored messages through the transport seam: ``Admin.query_by_key`` and
``Admin.view_message`` on a real embedded broker, and the same calls crossing the wire's
encodings both ways (the client's request, the broker's decode, its binary answer, the client's
decode), so the HTTP transports and the server speak them as the embedded transport answers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sdk import Admin, AsyncAdmin, EmbeddedBroker, Message, Producer
from sdk.errors import IllegalStateError, InvalidArgumentError
from sdk.outgoing import SendReceipt
from sdk.protocol.calls import CALLS
from sdk.protocol.data_plane import (
    decode_query_by_id_request,
    decode_query_by_key_request,
    encode_records_answer,
)
from sdk.transport.in_process import InProcessTransport
from sdk.transport.models import StoredRecords

from .brokers import SMALL_GEOMETRY

TOPIC = "orders"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path / "data", **SMALL_GEOMETRY) as embedded:
        yield embedded


@pytest.fixture
def receipts(broker: EmbeddedBroker) -> list[SendReceipt]:
    """Ten messages, ``order-0``..``order-9`` keyed ``k0``..``k4`` (two messages a key)."""
    with Producer(broker) as producer:
        return [
            producer.send(Message(TOPIC, f"order-{i}".encode(), tags="paid", keys=[f"k{i % 5}"]))
            for i in range(10)
        ]


def test_query_by_key_finds_the_keys_messages_newest_first(broker, receipts) -> None:
    with Admin(broker) as admin:
        found = admin.query_by_key(TOPIC, "k3")
        assert [m.body for m in found] == [b"order-8", b"order-3"]
        assert [m.phys_offset for m in found] == [receipts[8].phys_offset, receipts[3].phys_offset]
        assert found[0].keys == ["k3"] and found[0].tags == "paid"
        assert found[0].properties["UNIQ_KEY"] == receipts[8].msg_id  # the stored record, whole
        assert [m.body for m in admin.query_by_key(TOPIC, "k3", max_count=1)] == [b"order-8"]
        assert admin.query_by_key(TOPIC, "no-such-key") == []
        assert admin.query_by_key("OtherTopic", "k3") == []


def test_query_by_key_bounds_the_store_time(broker, receipts) -> None:
    first, last = receipts[3].store_timestamp, receipts[8].store_timestamp
    with Admin(broker) as admin:
        later = admin.query_by_key(TOPIC, "k3", begin_ms=last + 1)
        assert later == []
        window = [m.body for m in admin.query_by_key(TOPIC, "k3", begin_ms=first, end_ms=first)]
        assert window == ([b"order-3"] if first < last else [b"order-8", b"order-3"])


def test_view_message_finds_by_offset_msg_id_and_by_uniq_key(broker, receipts) -> None:
    sent = receipts[4]
    with Admin(broker) as admin:
        (by_offset,) = admin.view_message(sent.offset_msg_id)
        (by_uniq,) = admin.view_message(sent.msg_id)
        assert by_offset.body == by_uniq.body == b"order-4"
        assert by_offset.offset_msg_id == sent.offset_msg_id
        assert by_uniq.msg_id == sent.msg_id
        assert admin.view_message("0" * 32) == []


def test_bad_query_arguments_are_refused_before_the_broker(broker) -> None:
    with Admin(broker) as admin:
        for bad in ({"max_count": 0}, {"begin_ms": -1}, {"begin_ms": 10, "end_ms": 9}):
            with pytest.raises(InvalidArgumentError):
                admin.query_by_key(TOPIC, "k", **bad)
        with pytest.raises(InvalidArgumentError, match="names an id"):
            admin.view_message("")


def test_a_broker_without_a_key_index_refuses_a_key_query_by_name(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "plain", index_enabled=False, **SMALL_GEOMETRY) as broker:
        with Producer(broker) as producer:
            sent = producer.send(Message(TOPIC, b"x", keys=["k"]))
        with Admin(broker) as admin:
            with pytest.raises(IllegalStateError, match="without an index"):
                admin.query_by_key(TOPIC, "k")
            assert [m.body for m in admin.view_message(sent.offset_msg_id)] == [b"x"]


def test_async_admin_queries_as_admin_does(broker, receipts) -> None:
    async def main() -> tuple[list[bytes], list[bytes]]:
        async with AsyncAdmin(broker) as admin:
            by_key = await admin.query_by_key(TOPIC, "k1")
            viewed = await admin.view_message(receipts[6].offset_msg_id)
            return [m.body for m in by_key], [m.body for m in viewed]

    assert asyncio.run(main()) == ([b"order-6", b"order-1"], [b"order-6"])


class WireQueries:
    """The in-process transport's queries, each crossing the wire: the client's request
    (:data:`CALLS`), the broker's decode of it, its binary answer, the client's decode."""

    def __init__(self, real: InProcessTransport) -> None:
        self.real = real

    def query_by_key(self, *args: Any, **kwargs: Any) -> StoredRecords:
        request = CALLS["query_by_key"].request(args, kwargs, None)
        assert request.path == "/v1/query-by-key" and not request.binary
        topic, key, begin_ms, end_ms, max_count = decode_query_by_key_request(request.body)
        answer = self.real.query_by_key(
            topic, key, begin_ms=begin_ms, end_ms=end_ms, max_count=max_count
        )
        decoded: StoredRecords = CALLS["query_by_key"].answer(encode_records_answer(answer))
        return decoded

    def query_by_id(self, *args: Any, **kwargs: Any) -> StoredRecords:
        request = CALLS["query_by_id"].request(args, kwargs, None)
        assert request.path == "/v1/query-by-id"
        answer = self.real.query_by_id(decode_query_by_id_request(request.body))
        decoded: StoredRecords = CALLS["query_by_id"].answer(encode_records_answer(answer))
        return decoded


def test_the_queries_cross_the_wire_encodings_unchanged(broker, receipts) -> None:
    wire = WireQueries(InProcessTransport(broker.service))
    direct = InProcessTransport(broker.service)
    for args, kwargs in (
        ((TOPIC, "k2"), {}),
        ((TOPIC, "k2"), {"max_count": 1}),
        ((TOPIC,), {"key": "k2", "begin_ms": receipts[7].store_timestamp}),
    ):
        assert wire.query_by_key(*args, **kwargs) == direct.query_by_key(*args, **kwargs)
    crossed = wire.query_by_key(TOPIC, "k2")
    assert crossed.count == 2 and [m.body for m in crossed.messages()] == [b"order-7", b"order-2"]
    viewed = wire.query_by_id(message_id=receipts[0].msg_id)
    assert [m.body for m in viewed.messages()] == [b"order-0"]
    assert wire.query_by_id("nobody") == StoredRecords(b"", 0)


def test_a_query_of_a_closed_store_says_the_store_is_closed(tmp_path: Path) -> None:
    """Not 'the store cannot be queried' (IllegalStateError, final): a closed store is a
    broker going away, which the transports report as unavailable (retriable)."""
    from localstore import MessageStore, StoreClosedError
    from sdk.broker import queries

    store = MessageStore(tmp_path / "closed", **SMALL_GEOMETRY)
    store.close()
    with pytest.raises(StoreClosedError):
        queries.query_by_key(store, "orders", "k", begin_ms=0, end_ms=1, max_count=1)
    with pytest.raises(StoreClosedError):
        queries.query_by_id(store, "ABC")
