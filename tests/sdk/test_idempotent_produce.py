"""Idempotent produce: a stamped batch is stored once, and its stamp survives a restart and a
crash (the windows are rebuilt from the log's tail)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Sequence
from pathlib import Path

import orjson
import pytest

from localstore import NewMessage, UniformBatch
from localstore.record.codec import StoredMessage
from localstore.record.properties import PROPERTY_PUT_RECORDS
from localstore.record.tags import SCHEDULE_TOPIC
from sdk import Message
from sdk.broker.idempotence import ProducerWindows, stamped
from sdk.broker.service import BrokerOptions, BrokerService
from sdk.broker.transaction_records import HALF_TOPIC
from sdk.errors import InvalidArgumentError
from sdk.message import PROPERTY_PRODUCER_SEQ, ReceivedMessage
from sdk.outgoing import MessageBuilder
from sdk.protocol.produce_body import decode_produce_body, encode_produce_body
from sdk.transport.models import ProducerStamp, PullBatch, QueuePull, SendResult, decode_records
from tests.sdk.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
TOPIC = "orders"


def options(**settings: object) -> BrokerOptions:
    """Level 3 waits 40 ms, level 18 ten minutes (never due within a test)."""
    built = BrokerOptions(
        delay_levels=[40] * 17 + [600_000],
        schedule_poll_interval_s=0.01,
        **settings,
    )
    built.geometry = {"commitlog_file_size": 1 << 20}
    return built


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "broker"


@pytest.fixture
def service(root: Path):
    with BrokerService(root, options()) as broker:
        yield broker


def batch(bodies: list[bytes], queue_id: int = 0, topic: str = TOPIC) -> list[NewMessage]:
    return [
        NewMessage(topic, body, queue_id, {"UNIQ_KEY": f"U-{queue_id}-{body.decode()}"})
        for body in bodies
    ]


def wire_batch(bodies: list[bytes], queue_id: int = 0) -> Sequence[NewMessage]:
    """The batch as the HTTP server hands it to the service (a UniformBatch)."""
    encoded = encode_produce_body(batch(bodies, queue_id))
    return decode_produce_body(encoded, TOPIC, queue_id, count=len(bodies))


def stored(service: BrokerService, topic: str = TOPIC, queue_id: int = 0) -> list[StoredMessage]:
    pull = PullBatch("g", (QueuePull(topic, queue_id, 0),), max_count=1000)
    return decode_records(service.pull(pull).results[0].raw)


# -- one broker ----------------------------------------------------------------------------
def test_a_repeated_stamp_is_answered_with_the_first_answer_and_stored_once(
    service: BrokerService,
):
    stamp = ProducerStamp("producer-1", 7)
    first = service.send(batch([b"a", b"b", b"c"]), stamp=stamp)
    again = service.send(batch([b"a", b"b", b"c"]), stamp=stamp)
    assert first.status == "PUT_OK" and len(first.phys_offsets) == 3
    assert again == first
    assert service.max_offset(TOPIC, 0) == 3
    assert [m.body for m in stored(service)] == [b"a", b"b", b"c"]


def test_other_sequences_and_other_queues_are_stored(service: BrokerService):
    service.send(batch([b"a"]), stamp=ProducerStamp("p", 1))
    service.send(batch([b"b"]), stamp=ProducerStamp("p", 2))
    service.send(batch([b"c"]), stamp=ProducerStamp("other", 1))
    service.send(batch([b"d"], queue_id=1), stamp=ProducerStamp("p", 1))
    service.send(batch([b"e"]))  # unstamped: never deduplicated
    service.send(batch([b"e"]))
    assert [m.body for m in stored(service)] == [b"a", b"b", b"c", b"e", b"e"]
    assert [m.body for m in stored(service, queue_id=1)] == [b"d"]


def test_a_wire_batch_is_deduplicated_and_its_stamp_rides_on_its_last_record(
    service: BrokerService,
):
    stamp = ProducerStamp("host-9:pid.42", 3)  # ids may hold ':'
    first = service.send(wire_batch([b"x", b"y"]), stamp=stamp)
    assert service.send(wire_batch([b"x", b"y"]), stamp=stamp) == first
    records = stored(service)
    assert [m.body for m in records] == [b"x", b"y"]
    assert PROPERTY_PRODUCER_SEQ not in records[0].properties
    assert records[1].properties[PROPERTY_PRODUCER_SEQ] == "host-9:pid.42:3:2"
    assert records[1].properties["UNIQ_KEY"] == "U-0-y"  # the other properties are intact


def test_consumers_do_not_see_the_stamp(service: BrokerService):
    message = NewMessage(TOPIC, b"a", 0, {"UNIQ_KEY": "U1", "colour": "blue"})
    service.send([message], stamp=ProducerStamp("p", 1))
    received = ReceivedMessage.from_stored(stored(service)[0])
    assert dict(received.properties) == {"colour": "blue"}


def test_stamping_leaves_the_callers_batch_unchanged():
    messages = batch([b"a", b"b"])
    copy = stamped(messages, ProducerStamp("p", 1))
    assert PROPERTY_PRODUCER_SEQ not in messages[1].properties
    assert copy[1].properties[PROPERTY_PRODUCER_SEQ] == "p:1:2"
    wire = decode_produce_body(encode_produce_body(messages), TOPIC, 0, count=2)
    stamped_wire = stamped(wire, ProducerStamp("p", 1))
    assert [m.properties for m in stamped_wire] == [m.properties for m in copy]
    assert PROPERTY_PRODUCER_SEQ not in wire[1].properties


def test_a_stamped_producer_batch_names_the_stamp_as_its_one_other_property():
    built = MessageBuilder().build_batch([Message(TOPIC, b"a"), Message(TOPIC, b"b")], 0)
    wire = decode_produce_body(encode_produce_body(built), TOPIC, 0, count=2)
    for plain in (built, wire):
        assert isinstance(plain, UniformBatch) and plain.plain
        copy = stamped(plain, ProducerStamp("p", 1))
        assert isinstance(copy, UniformBatch) and not copy.plain
        assert copy.other_names == {PROPERTY_PRODUCER_SEQ}  # known: lookups need no scan
        assert copy.holds_property(PROPERTY_PRODUCER_SEQ)
        assert not copy.holds_property(PROPERTY_PUT_RECORDS)


def test_a_refused_send_leaves_its_stamp_free(service: BrokerService):
    stamp = ProducerStamp("p", 1)
    refused = service.send([NewMessage("bad topic!", b"a", 0, {})], stamp=stamp)
    assert refused.status == "MESSAGE_ILLEGAL"
    assert service.send(batch([b"a"]), stamp=stamp).status == "PUT_OK"
    assert service.max_offset(TOPIC, 0) == 1


def test_many_threads_sending_one_stamp_at_once_store_it_once(service: BrokerService):
    threads_count = 16
    start = threading.Barrier(threads_count)
    answers: list[SendResult] = []
    lock = threading.Lock()

    def send() -> None:
        start.wait(timeout=30)
        answer = service.send(batch([b"a", b"b"]), stamp=ProducerStamp("p", 1))
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=send) for _ in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(answers) == threads_count
    assert all(answer == answers[0] and answer.stored for answer in answers)
    assert service.max_offset(TOPIC, 0) == 2


def test_a_copy_arriving_while_the_first_is_stored_waits_for_its_answer():
    windows = ProducerWindows()
    stamp = ProducerStamp("p", 1)
    first_storing, copy_answered = threading.Event(), threading.Event()
    stores: list[str] = []
    copies: list[SendResult] = []

    def copy() -> None:
        copies.append(windows.once(stamp, TOPIC, 0, lambda: _stores_as("copy", stores)))
        copy_answered.set()

    def first_store() -> SendResult:
        first_storing.set()
        threading.Thread(target=copy).start()  # arrives while this store is running
        return _stores_as("first", stores)

    first = windows.once(stamp, TOPIC, 0, first_store)
    assert copy_answered.wait(timeout=30)
    assert stores == ["first"] and copies == [first]


def _stores_as(name: str, stores: list[str]) -> SendResult:
    stores.append(name)
    return SendResult("PUT_OK", "", TOPIC, 0, len(stores) - 1, [100 * len(stores)], "AB", 1)


@pytest.mark.parametrize(
    "phys_offsets",
    [
        [],
        [7],
        [100, 350, 600, 850],
        [100, 375, 625, 875],
        [100, 350, 601, 851],
        [0, 0],
        [9, 5],
        [4, 8, 16],
        [3, 9],
        [1, 5, 3],
        [0, 2, 4, 7, 9],
        [2**62, 2**62 + 2**40],
        [0, 2**63 - 1],
    ],
)
def test_a_retried_stamp_is_answered_with_the_first_copys_exact_offsets(
    phys_offsets: list[int],
) -> None:
    windows = ProducerWindows()
    stamp = ProducerStamp("p", 1)
    stored = SendResult("PUT_OK", "", TOPIC, 0, 3, list(phys_offsets), "AB", 1)
    assert windows.once(stamp, TOPIC, 0, lambda: stored) == stored
    again = windows.once(stamp, TOPIC, 0, lambda: pytest.fail("stored twice"))
    assert again == stored and again.phys_offsets == phys_offsets
    assert again.phys_offsets is not stored.phys_offsets


def test_evenly_spaced_offsets_are_kept_as_a_range() -> None:
    """A batch of equal records (a producer's usual batch; its first record holds the put
    mark) costs a few words in the window, not eight bytes an offset."""
    windows = ProducerWindows()
    offsets = [1000, *range(1259, 1259 + 99 * 234, 234)]
    windows.once(
        ProducerStamp("p", 1),
        TOPIC,
        0,
        lambda: SendResult("PUT_OK", "", TOPIC, 0, 0, offsets, "AB", 1),
    )
    (window,) = windows._windows.values()
    kept = window[1].phys_offsets
    assert len(kept.head) == 1 and len(kept.run) == 99
    assert windows.answer(ProducerStamp("p", 1), TOPIC, 0).phys_offsets == offsets


def test_a_store_that_raises_reaches_the_caller_and_leaves_the_stamp_free():
    windows = ProducerWindows()
    stamp = ProducerStamp("p", 1)

    def failing() -> SendResult:
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        windows.once(stamp, TOPIC, 0, failing)
    stores: list[str] = []
    assert windows.once(stamp, TOPIC, 0, lambda: _stores_as("retry", stores)).stored
    assert stores == ["retry"]


def test_delayed_and_half_messages_are_deduplicated_by_the_topic_they_were_sent_to(
    service: BrokerService,
):
    delayed = NewMessage(TOPIC, b"later", 2, {"UNIQ_KEY": "D1", "DELAY": "3"})
    first = service.send([delayed], stamp=ProducerStamp("p", 1))
    assert first.topic == SCHEDULE_TOPIC
    assert service.send([delayed], stamp=ProducerStamp("p", 1)) == first
    half = NewMessage(TOPIC, b"half", 1, {"UNIQ_KEY": "H1"})
    first_half = service.send_half("txgroup", half, stamp=ProducerStamp("p", 1))
    assert first_half.topic == HALF_TOPIC
    assert service.send_half("txgroup", half, stamp=ProducerStamp("p", 1)) == first_half
    assert service.max_offset(HALF_TOPIC, 0) == 1
    assert service.max_offset(SCHEDULE_TOPIC, 2) == 1
    # delivered when due, without the stamp: the stored delayed record alone names it
    wait_until(lambda: service.max_offset(TOPIC, 2) == 1, timeout_s=30)
    assert PROPERTY_PRODUCER_SEQ not in stored(service, queue_id=2)[0].properties


def test_a_commit_and_a_retry_copy_leave_the_stamp_out(service: BrokerService):
    half = NewMessage(TOPIC, b"half", 1, {"UNIQ_KEY": "H1"})
    answer = service.send_half("txgroup", half, stamp=ProducerStamp("p", 1))
    service.end_transaction("txgroup", answer.phys_offsets[0], "H1", "COMMIT")
    committed = stored(service, queue_id=1)
    assert [m.body for m in committed] == [b"half"]
    assert PROPERTY_PRODUCER_SEQ not in committed[0].properties
    sent = service.send(batch([b"a"]), stamp=ProducerStamp("p", 1))
    retry = service.send_back("g", sent.phys_offsets[0], delay_level=-1)  # to the DLQ at once
    assert PROPERTY_PRODUCER_SEQ not in stored(service, retry.topic)[0].properties


def test_the_windows_keep_their_bounds(root: Path):
    settings = {"idempotence_window_per_queue": 4, "idempotence_max_stamps": 8}
    with BrokerService(root, options(**settings)) as service:
        for sequence in range(6):
            service.send(batch([f"{sequence}".encode()]), stamp=ProducerStamp("p", sequence))
        windows = service.producer_windows
        assert windows.stamps == 4
        assert windows.answer(ProducerStamp("p", 1), TOPIC, 0) is None  # left the window
        assert windows.answer(ProducerStamp("p", 2), TOPIC, 0) is not None
        service.send(batch([b"1"]), stamp=ProducerStamp("p", 1))  # unknown now: stored again
        assert service.max_offset(TOPIC, 0) == 7
        for queue_id in (1, 2):  # two more keys: 12 stamps > 8, the oldest key leaves whole
            for sequence in range(4):
                service.send(batch([b"q"], queue_id), stamp=ProducerStamp("p", sequence))
        assert windows.stamps == 8 and len(windows) == 2
        assert windows.answer(ProducerStamp("p", 5), TOPIC, 0) is None
        assert windows.answer(ProducerStamp("p", 3), TOPIC, 2) is not None


def test_bounds_that_cannot_hold_are_refused(root: Path):
    with pytest.raises(InvalidArgumentError, match="idempotence_max_stamps"):
        BrokerService(root, options(idempotence_window_per_queue=8, idempotence_max_stamps=4))
    with pytest.raises(InvalidArgumentError, match="idempotence_window_per_queue"):
        ProducerWindows(0, 10)


# -- across a restart and a crash ------------------------------------------------------------
def send_stamped(service: BrokerService) -> dict[str, SendResult]:
    """A mix of stamped sends: batches on two queues, a wire batch, a delayed and a half."""
    answers = {
        "batch-0": service.send(batch([b"a", b"b", b"c"]), stamp=ProducerStamp("p", 1)),
        "batch-1": service.send(batch([b"d", b"e"], 1), stamp=ProducerStamp("p", 1)),
        "wire": service.send(wire_batch([b"f", b"g"]), stamp=ProducerStamp("q:1", 9)),
        "single": service.send(batch([b"h"]), stamp=ProducerStamp("p", 2)),
        "delayed": service.send(
            [NewMessage(TOPIC, b"later", 3, {"UNIQ_KEY": "D1", "DELAY": "18"})],
            stamp=ProducerStamp("p", 1),
        ),
        "half": service.send_half(
            "txgroup",
            NewMessage(TOPIC, b"half", 2, {"UNIQ_KEY": "H1"}),
            stamp=ProducerStamp("p", 1),
        ),
    }
    assert all(answer.stored for answer in answers.values())
    return answers


def resend_stamped(service: BrokerService) -> dict[str, SendResult]:
    """The same sends again (what producers retrying after a lost answer do)."""
    return {
        "batch-0": service.send(batch([b"a", b"b", b"c"]), stamp=ProducerStamp("p", 1)),
        "batch-1": service.send(batch([b"d", b"e"], 1), stamp=ProducerStamp("p", 1)),
        "wire": service.send(wire_batch([b"f", b"g"]), stamp=ProducerStamp("q:1", 9)),
        "single": service.send(batch([b"h"]), stamp=ProducerStamp("p", 2)),
        "delayed": service.send(
            [NewMessage(TOPIC, b"later", 3, {"UNIQ_KEY": "D1", "DELAY": "18"})],
            stamp=ProducerStamp("p", 1),
        ),
        "half": service.send_half(
            "txgroup",
            NewMessage(TOPIC, b"half", 2, {"UNIQ_KEY": "H1"}),
            stamp=ProducerStamp("p", 1),
        ),
    }


def offsets(service: BrokerService) -> list[int]:
    return [service.max_offset(TOPIC, q) for q in range(4)] + [
        service.max_offset(SCHEDULE_TOPIC, 17),
        service.max_offset(HALF_TOPIC, 0),
    ]


def test_the_windows_survive_a_close_and_reopen(root: Path, caplog: pytest.LogCaptureFixture):
    with BrokerService(root, options()) as service:
        answers = send_stamped(service)
        before = offsets(service)
    with caplog.at_level(logging.INFO, "sdk.broker.idempotence_rebuild"):
        reopened = BrokerService(root, options())
    with reopened:
        assert "6 stamps of 2 producers" in caplog.text
        assert resend_stamped(reopened) == answers
        assert offsets(reopened) == before == [6, 2, 0, 0, 1, 1]


CRASHING_SCRIPT = """
import os, sys
import orjson
from tests.sdk.test_idempotent_produce import options, send_stamped
from sdk.broker.service import BrokerService

root, answers_path = sys.argv[1:3]
service = BrokerService(root, options())
answers = send_stamped(service)
document = {name: [a.status, a.topic, a.queue_id, a.queue_offset, a.phys_offsets,
              a.store_host, a.store_timestamp] for name, a in answers.items()}
with open(answers_path + ".tmp", "wb") as out:
    out.write(orjson.dumps(document))
    out.flush()
    os.fsync(out.fileno())
os.replace(answers_path + ".tmp", answers_path)
sys.stdin.read()  # wait for the SIGKILL, never closing the broker
"""


@pytest.mark.integration
def test_the_windows_survive_a_crash(root: Path, tmp_path: Path):
    answers_path, log_path = tmp_path / "answers.json", tmp_path / "child.log"
    with open(log_path, "w") as log:
        child = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(CRASHING_SCRIPT), str(root), str(answers_path)],
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: answers_path.exists() or child.poll() is not None, timeout_s=60)
        assert child.poll() is None, log_path.read_text()
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
        if child.stdin is not None:
            child.stdin.close()
    answered = {
        name: SendResult(status, "", topic, queue_id, queue_offset, phys, host, timestamp)
        for name, (status, topic, queue_id, queue_offset, phys, host, timestamp) in orjson.loads(
            answers_path.read_bytes()
        ).items()
    }
    with BrokerService(root, options()) as service:
        before = offsets(service)
        assert before == [6, 2, 0, 0, 1, 1]
        assert resend_stamped(service) == answered
        assert offsets(service) == before


def test_the_rebuild_reads_only_the_tail_it_is_given(root: Path):
    with BrokerService(root, options()) as service:
        old = service.send(batch([b"old"]), stamp=ProducerStamp("p", 1))
        for chunk in range(40):  # about 80 KiB of unstamped records after it
            service.send(batch([f"{chunk}".encode() + b"." * 1900]))
        new = service.send(batch([b"new"]), stamp=ProducerStamp("p", 2))
    with BrokerService(root, options(idempotence_rebuild_bytes=16 * 1024)) as service:
        windows = service.producer_windows
        assert windows.answer(ProducerStamp("p", 2), TOPIC, 0) == new
        assert windows.answer(ProducerStamp("p", 1), TOPIC, 0) is None
    with BrokerService(root, options()) as service:  # 64 MiB by default: the whole log
        assert service.producer_windows.answer(ProducerStamp("p", 1), TOPIC, 0) == old


def test_a_stamp_in_a_record_body_is_not_taken_for_one(root: Path):
    body = f"{PROPERTY_PRODUCER_SEQ}\x01p:5:1\x02".encode()
    with BrokerService(root, options()) as service:
        service.send([NewMessage(TOPIC, body, 0, {"UNIQ_KEY": "U1"})])
    with BrokerService(root, options()) as service:
        assert service.producer_windows.stamps == 0
        service.send([NewMessage(TOPIC, b"x", 0, {})], stamp=ProducerStamp("p", 5))
        assert service.max_offset(TOPIC, 0) == 2


def test_the_rebuild_keeps_the_newest_stamps_within_the_bounds(root: Path):
    settings = {"idempotence_window_per_queue": 2, "idempotence_max_stamps": 4}
    with BrokerService(root, options()) as service:
        for sequence in range(12):
            queue_id = sequence % 3
            service.send(batch([b"m"], queue_id), stamp=ProducerStamp("p", sequence))
    with BrokerService(root, options(**settings)) as service:
        windows = service.producer_windows
        assert windows.stamps == 4
        assert windows.answer(ProducerStamp("p", 11), TOPIC, 2) is not None
        assert windows.answer(ProducerStamp("p", 10), TOPIC, 1) is not None
        assert windows.answer(ProducerStamp("p", 0), TOPIC, 0) is None


def test_a_message_may_not_carry_the_stamp_property_itself(service: BrokerService):
    forged = {"UNIQ_KEY": "U1", PROPERTY_PRODUCER_SEQ: "p:1:1"}
    answer = service.send([NewMessage(TOPIC, b"a", 0, forged)])
    assert answer.status == "MESSAGE_ILLEGAL" and PROPERTY_PRODUCER_SEQ in answer.detail
    wire = decode_produce_body(
        encode_produce_body([NewMessage(TOPIC, b"a", 0, forged)]), TOPIC, 0, count=1
    )
    assert service.send(wire, stamp=ProducerStamp("p", 2)).status == "MESSAGE_ILLEGAL"
    half = NewMessage(TOPIC, b"h", 0, forged)
    assert service.send_half("txgroup", half).status == "MESSAGE_ILLEGAL"
    assert service.max_offset(TOPIC, 0) == 0 and service.max_offset(HALF_TOPIC, 0) == 0
