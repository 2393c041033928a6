"""append_all: many puts to several queues, one store call, one flush request, one delivery."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from localstore import MessageStore, NewMessage, PutStatus
from localstore.commitlog.flush import answer_waiters
from localstore.put.writer import Answer, Put, append_all

from .conftest import GatheredFlushRequests


def _put(queue_id: int, body: bytes, token: Any) -> Put:
    return ((NewMessage("WriterTopic", body, queue_id),), False, token)


def test_one_turn_over_four_queues_makes_one_flush_request_and_one_delivery(tmp_path: Path):
    deliveries: list[list[Answer]] = []
    requests = GatheredFlushRequests()
    with MessageStore(tmp_path, flush_mode="sync") as store:
        puts = [_put(i % 4, f"m{i}".encode(), i) for i in range(12)]
        ready = append_all(store, puts, deliveries.append, requests)

        assert ready == []  # nothing is refused, and nothing is answered before its flush
        assert len(requests.waiters) == 1
        assert requests.waiters[0].end_offset == store.commitlog.max_offset
        assert deliveries == []

        answer_waiters(requests.waiters, store.commitlog.max_offset, None)
        assert len(deliveries) == 1
        answers = dict(deliveries[0])
        assert sorted(answers) == list(range(12))
        for token, result in answers.items():
            assert result.status is PutStatus.PUT_OK
            assert (result.queue_id, result.queue_offset) == (token % 4, token // 4)


def test_a_failed_flush_answers_every_stored_put_of_the_call(tmp_path: Path):
    deliveries: list[list[Answer]] = []
    requests = GatheredFlushRequests()
    with MessageStore(tmp_path, flush_mode="sync") as store:
        append_all(store, [_put(q, b"x", q) for q in range(3)], deliveries.append, requests)
        answer_waiters(requests.waiters, 0, "the disk is gone")
        (answers,) = deliveries
        assert [result.status for _, result in answers] == [PutStatus.FLUSH_DISK_TIMEOUT] * 3
        assert all("the disk is gone" in result.detail for _, result in answers)


def test_puts_of_several_messages_get_their_own_offsets_back(tmp_path: Path):
    deliveries: list[list[Answer]] = []
    with MessageStore(tmp_path) as store:  # async flush: every answer is ready at once
        batch = tuple(NewMessage("WriterTopic", f"b{i}".encode(), 0) for i in range(3))
        puts: list[Put] = [_put(0, b"a", "a"), (batch, False, "batch"), _put(0, b"c", "c")]
        ready = dict(append_all(store, puts, deliveries.append))
        assert deliveries == []
        assert [ready[t].queue_offset for t in ("a", "batch", "c")] == [0, 1, 4]
        assert [len(ready[t].phys_offsets) for t in ("a", "batch", "c")] == [1, 3, 1]
        for token, result in ready.items():
            got = store.get_messages("WriterTopic", 0, result.queue_offset, max_count=1)
            assert got.messages[0].phys_offset == result.phys_offsets[0], token
        bodies = [m.body for m in store.get_messages("WriterTopic", 0, 0).messages]
        assert bodies == [b"a", b"b0", b"b1", b"b2", b"c"]
