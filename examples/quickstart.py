"""Quickstart: Quiver's embedded store (``localstore``) in one short script.

Creates a store in ``./quickstart-data`` (or the directory given as the first argument; it is
deleted first), puts messages with tags and keys (one, then a batch), reads them back with a tag
filter, looks one up by its offset message id, and closes the store.

    make demo                                # or, from the repository root:
    .venv/bin/python examples/quickstart.py [DIR]

Afterwards the store can be inspected with ``quiver store info quickstart-data``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from localstore import MessageStore, NewMessage, PutResult, UniqKeyGenerator

TOPIC = "orders"


def order(ids: UniqKeyGenerator, number: int, state: str) -> NewMessage:
    """An order event: tagged with its state, keyed by order id, with a producer-side id."""
    body = f'{{"order": {number}, "state": "{state}"}}'.encode()
    properties = {
        "TAGS": state,
        "KEYS": f"order-{number} user-{number % 3}",
        "UNIQ_KEY": ids.next(),
    }
    return NewMessage(TOPIC, body, queue_id=0, properties=properties)


def check(result: PutResult) -> None:
    """Stop the demo if a put was not stored."""
    if not result.ok:
        sys.exit(f"put failed: {result.status.value} {result.detail}")


def main(argv: list[str]) -> int:
    """Run the demo in ``argv[1]`` (default ``./quickstart-data``)."""
    data = Path(argv[1]) if len(argv) > 1 else Path("quickstart-data")
    if data.exists():
        if any(data.iterdir()) and not (data / "config" / "store.json").exists():
            print(f"{data} is not empty and holds no Quiver store: not deleting it")
            return 2
        shutil.rmtree(data)
    ids = UniqKeyGenerator()

    # Small segments (1 MiB commitlog files) keep the demo's files small; the defaults are
    # RocketMQ's (1 GiB). The geometry is recorded and must match on every later open.
    with MessageStore(data, commitlog_file_size=1 << 20, cq_entries_per_file=1000) as store:
        print(f"1. created a store in {data}/")

        result = store.put(order(ids, 1, "created"))
        check(result)
        first_id = result.offset_msg_id
        print(
            f"2. put one message: {result.status.value}, {TOPIC}/{result.queue_id} "
            f"queue offset {result.queue_offset}, offsetMsgId {first_id}"
        )

        batch = [
            order(ids, n, state)
            for n, state in [
                (2, "created"),
                (1, "paid"),
                (3, "created"),
                (2, "paid"),
                (1, "shipped"),
            ]
        ]
        result = store.put_batch(batch)  # one append; all messages go to one queue
        check(result)
        print(
            f"3. put a batch of {len(batch)}: {result.status.value}, queue offsets "
            f"{result.queue_offset}..{result.queue_offset + len(batch) - 1}"
        )

        got = store.get_messages(TOPIC, 0, 0, max_count=32, tags="paid || shipped")
        print(
            f"4. read {TOPIC}/0 from offset 0 with tags 'paid || shipped': "
            f"{got.status.value}, {len(got.messages)} message(s), next offset "
            f"{got.next_offset}"
        )
        for message in got.messages:
            print(
                f"     offset {message.queue_offset}  tags={message.tags}  "
                f"keys={message.keys}  body={message.body.decode()}"
            )

        found = store.message_by_offset_msg_id(first_id)
        print(
            f"5. looked up offsetMsgId {first_id}: {found.topic}/{found.queue_id} queue "
            f"offset {found.queue_offset}, msgId {found.msg_id}, body {found.body.decode()}"
        )

        history = store.query_by_key(TOPIC, "order-1")
        print(
            f"6. query by key order-1 (index files, newest first): "
            f"{[m.body.decode() for m in history]}"
        )

        since = store.offset_for_timestamp(TOPIC, 0, found.store_timestamp)
        print(
            f"7. the first offset stored at or after {found.store_timestamp} ms is {since}; "
            f"{TOPIC}/0 holds queue offsets [{store.min_offset(TOPIC, 0)}, "
            f"{store.max_offset(TOPIC, 0)})"
        )
    print(f"8. closed the store; inspect it with: quiver store info {data}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
