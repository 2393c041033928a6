"""The asyncio clients run on the event loop alone: they start no thread of their own.

Each scenario opens the broker first (its own flush, index and check threads are the broker's,
not the clients'), takes the set of live threads, then runs the clients through what makes
them talk to the broker beyond sends and pulls: joining a group (heartbeat, allocation, leases,
start offsets), a failed batch (send-back), a periodic lease renewal and offset persist,
transaction checks, an orderly retry, and close (persist, leave the group). No thread may
appear meanwhile: not a client thread, and not one of asyncio's default executor
(``asyncio.to_thread``), which a client that still blocked somewhere would need.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from sdk import (
    AsyncProducer,
    AsyncPullConsumer,
    AsyncPushConsumer,
    AsyncTransactionalProducer,
    BrokerOptions,
    ConsumeFrom,
    ConsumeResult,
    EmbeddedBroker,
    Message,
    MessageModel,
    ReceivedMessage,
    TransactionState,
)

TOPIC = "threadless"


def live_threads() -> set[threading.Thread]:
    return set(threading.enumerate())


def new_threads(before: set[threading.Thread]) -> list[str]:
    return sorted(t.name for t in live_threads() - before)


def test_async_producer_and_push_consumer_start_no_thread(tmp_path: Path) -> None:
    options = BrokerOptions(delay_levels=[10] * 18)  # a retry comes back after 10 ms
    with EmbeddedBroker(tmp_path / "b", options=options, commitlog_file_size=1 << 20) as broker:

        async def scenario() -> list[str]:
            before = live_threads()
            received: list[bytes] = []
            failed_once: set[bytes] = set()
            done = asyncio.Event()

            async def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
                body = messages[0].body
                if body == b"m3" and body not in failed_once:
                    failed_once.add(body)
                    return ConsumeResult.RECONSUME_LATER  # sent back: a retry-topic message
                received.append(body)
                if len(received) == 6:
                    done.set()
                return ConsumeResult.SUCCESS

            async with (
                AsyncProducer(broker) as producer,
                AsyncPushConsumer(
                    broker,
                    "g-threadless",
                    {TOPIC: None},
                    listener,
                    consume_from=ConsumeFrom.FIRST_OFFSET,
                    lease_renew_interval_s=0.05,
                ) as consumer,
            ):
                for i in range(6):
                    await producer.send(Message(TOPIC, f"m{i}".encode()))
                await asyncio.wait_for(done.wait(), 30)
                await consumer.persist_offsets()
            assert sorted(received) == [f"m{i}".encode() for i in range(6)]
            return new_threads(before)

        assert asyncio.run(scenario()) == []


def test_async_orderly_and_broadcast_push_consumers_start_no_thread(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as broker:

        async def scenario() -> list[str]:
            before = live_threads()
            seen: list[tuple[str, bytes]] = []
            both = asyncio.Event()
            retried = False

            def listener(kind: str):  # type: ignore[no-untyped-def]
                async def handle(messages: list[ReceivedMessage]) -> ConsumeResult | None:
                    nonlocal retried
                    if kind == "orderly" and not retried:
                        retried = True
                        return ConsumeResult.RECONSUME_LATER  # retried in place, in order
                    seen.extend((kind, m.body) for m in messages)
                    if {k for k, _ in seen} == {"orderly", "broadcast"}:
                        both.set()
                    return None

                return handle

            async with AsyncProducer(broker) as producer:
                orderly = AsyncPushConsumer(
                    broker,
                    "g-orderly",
                    {TOPIC: None},
                    listener("orderly"),
                    consume_from=ConsumeFrom.FIRST_OFFSET,
                    orderly=True,
                    orderly_retry_pause_s=0.01,
                )
                broadcast = AsyncPushConsumer(
                    broker,
                    "g-broadcast",
                    {TOPIC: None},
                    listener("broadcast"),
                    consume_from=ConsumeFrom.FIRST_OFFSET,
                    message_model=MessageModel.BROADCASTING,
                    offsets_dir=str(tmp_path / "offsets"),
                )
                async with orderly, broadcast:
                    await producer.send(Message(TOPIC, b"one"))
                    await asyncio.wait_for(both.wait(), 30)
            return new_threads(before)

        assert asyncio.run(scenario()) == []


def test_async_pull_consumer_and_transactional_producer_start_no_thread(tmp_path: Path) -> None:
    options = BrokerOptions(transaction_timeout_ms=0, transaction_check_interval_ms=50)
    with EmbeddedBroker(tmp_path / "b", options=options, commitlog_file_size=1 << 20) as broker:

        async def scenario() -> list[str]:
            before = live_threads()
            checked = asyncio.Event()

            async def execute_local(message: Message) -> TransactionState:
                return TransactionState.UNKNOWN  # the broker asks the checker later

            async def checker(message: ReceivedMessage) -> TransactionState:
                checked.set()
                return TransactionState.COMMIT

            async with AsyncTransactionalProducer(
                broker, "tx-group", checker, check_wait_ms=100
            ) as tx:
                await tx.send_in_transaction(Message(TOPIC, b"in-doubt"), execute_local)
                await asyncio.wait_for(checked.wait(), 30)
            async with AsyncPullConsumer(
                broker, "g-pull", consume_from=ConsumeFrom.FIRST_OFFSET
            ) as consumer:
                consumer.subscribe([TOPIC])
                got: list[bytes] = []
                while not got:
                    got = [m.body for m in await consumer.poll(timeout_s=1.0)]
                await consumer.commit()
                assert await consumer.committed(consumer.assignment()[0]) is not None
            assert got == [b"in-doubt"]
            return new_threads(before)

        assert asyncio.run(scenario()) == []
