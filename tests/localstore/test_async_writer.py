"""AsyncStoreWriter: puts from asyncio code, coalesced per queue, durable under sync flush."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from localstore import MessageStore, NewMessage, PutResult, PutStatus
from localstore.put.async_writer import AsyncStoreWriter
from localstore.record.codec import SYSFLAG_TRANSACTION_PREPARED as PREPARED

from .conftest import RunOnLoop


def _message(queue_id: int, body: bytes) -> NewMessage:
    return NewMessage("AsyncTopic", body, queue_id, {"KEYS": body.decode()})


def put_in_one_turn(store: MessageStore, messages: list[NewMessage]) -> list[PutResult]:
    """Put ``messages`` from one turn of an event loop (one merged append per queue)."""

    async def main() -> list[PutResult]:
        writer = AsyncStoreWriter(store)
        try:
            return list(await asyncio.gather(*(writer.put(m) for m in messages)))
        finally:
            writer.close()

    return asyncio.run(main())


@pytest.mark.parametrize("flush_mode", ["sync", "async"])
def test_concurrent_producers_keep_per_queue_order_and_offsets(
    tmp_path: Path, flush_mode: str, run_on_loop: RunOnLoop
):
    producers, per_producer = 16, 50

    async def main(store: MessageStore) -> list[list[int]]:
        writer = AsyncStoreWriter(store)

        async def produce(p: int) -> list[int]:
            offsets = []
            for i in range(per_producer):
                result = await writer.put(_message(p % 4, f"p{p}-{i}".encode()))
                assert result.status is PutStatus.PUT_OK, result.detail
                if flush_mode == "sync":  # answered only once its whole record is durable
                    end = result.phys_offset + store.commitlog.record_size_at(result.phys_offset)
                    assert store.commitlog.flushed_offset >= end
                offsets.append(result.queue_offset)
            return offsets

        try:
            return await asyncio.gather(*(produce(p) for p in range(producers)))
        finally:
            writer.close()

    with MessageStore(tmp_path, flush_mode=flush_mode, commitlog_file_size=65536) as store:
        offsets = run_on_loop(main(store))
        if flush_mode == "sync":
            assert 0 < store.flusher.fsync_count < producers * per_producer  # shared fsyncs
        for p, producer_offsets in enumerate(offsets):
            assert producer_offsets == sorted(producer_offsets)  # a producer's order is kept
            for i, queue_offset in enumerate(producer_offsets):
                got = store.get_messages("AsyncTopic", p % 4, queue_offset, max_count=1)
                assert got.messages[0].body == f"p{p}-{i}".encode()
        total = sum(store.max_offset("AsyncTopic", q) for q in range(4))
        assert total == producers * per_producer


def test_a_bad_put_does_not_fail_its_neighbours(tmp_path: Path):
    with MessageStore(tmp_path, flush_mode="sync") as store:
        results = put_in_one_turn(
            store,
            [
                _message(0, b"good-1"),
                NewMessage("AsyncTopic", b"", 0),  # empty body: rejected
                _message(0, b"good-2"),
            ],
        )
        statuses = [r.status for r in results]
        assert statuses == [PutStatus.PUT_OK, PutStatus.MESSAGE_ILLEGAL, PutStatus.PUT_OK]
        got = store.get_messages("AsyncTopic", 0, 0)
        assert [m.body for m in got.messages] == [b"good-1", b"good-2"]


def test_put_after_close_is_refused(tmp_path: Path):
    async def main(store: MessageStore) -> PutStatus:
        writer = AsyncStoreWriter(store)
        writer.close()
        return (await writer.put(_message(0, b"late"))).status

    with MessageStore(tmp_path) as store:
        assert asyncio.run(main(store)) is PutStatus.SERVICE_NOT_AVAILABLE


def test_close_appends_the_puts_already_made(tmp_path: Path):
    """Puts made in this turn of the loop are appended at its end; closing first appends
    them at once, so their futures still resolve."""

    async def main(store: MessageStore) -> list[PutStatus]:
        writer = AsyncStoreWriter(store)
        puts = [asyncio.ensure_future(writer.put(_message(0, f"m{i}".encode()))) for i in range(3)]
        await asyncio.sleep(0)  # the puts are made; their append is still to come
        assert store.max_offset("AsyncTopic", 0) == 0
        writer.close()
        return [(await put).status for put in puts]

    with MessageStore(tmp_path, flush_mode="sync", commitlog_file_size=65536) as store:
        assert asyncio.run(main(store)) == [PutStatus.PUT_OK] * 3
        got = store.get_messages("AsyncTopic", 0, 0)
        assert [m.body for m in got.messages] == [b"m0", b"m1", b"m2"]


def test_answers_for_a_closed_loop_are_dropped(tmp_path: Path):
    """The flush thread answers durable puts through the loop; if the loop was closed
    meanwhile, the answers are dropped instead of raising on the flush thread."""
    with MessageStore(tmp_path, flush_mode="sync", commitlog_file_size=65536) as store:
        loop = asyncio.new_event_loop()
        writer = AsyncStoreWriter(store, loop=loop, sync_process=False)
        orphan = loop.create_future()
        loop.close()
        writer._deliver([(orphan, PutResult(PutStatus.PUT_OK, ""))])  # as the flush thread does
        assert not orphan.done()
        assert store.put(_message(0, b"after")).status is PutStatus.PUT_OK  # flushing goes on


def test_a_prepared_transaction_put_gets_no_offset_among_plain_ones(tmp_path: Path):
    with MessageStore(tmp_path) as store:
        results = put_in_one_turn(
            store,
            [
                _message(0, b"plain-1"),
                NewMessage("AsyncTopic", b"half", 0, sys_flag=PREPARED),
                _message(0, b"plain-2"),
            ],
        )
        assert all(r.ok for r in results)
        assert [r.queue_offset for r in results] == [0, 0, 1]  # the prepared one: offset 0
        got = store.get_messages("AsyncTopic", 0, 0)
        assert [m.body for m in got.messages] == [b"plain-1", b"plain-2"]
        assert store.message_at(results[1].phys_offset).body == b"half"


def test_a_put_only_the_encoder_refuses_does_not_fail_its_neighbours(tmp_path: Path):
    """Properties over 32,767 bytes pass the batch check and are refused while encoding; the
    merged append is then retried put by put."""
    huge = NewMessage("AsyncTopic", b"huge", 0, {"P": "v" * 40_000})

    with MessageStore(tmp_path) as store:
        results = put_in_one_turn(store, [_message(0, b"good-1"), huge, _message(0, b"good-2")])
        assert [r.status for r in results] == [
            PutStatus.PUT_OK,
            PutStatus.PROPERTIES_SIZE_EXCEEDED,
            PutStatus.PUT_OK,
        ]
        assert [r.queue_offset for r in (results[0], results[2])] == [0, 1]
        got = store.get_messages("AsyncTopic", 0, 0)
        assert [m.body for m in got.messages] == [b"good-1", b"good-2"]
