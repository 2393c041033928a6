"""``quiver read``: messages of a topic (one queue or all), optionally filtered by tags.

quiver read (--data DIR | --broker URL) --topic T [--queue N] [--from-offset N] [--max N]
            [--tags EXPR] [--json]

From a store (read-only view when another process holds it), or pulled from a running broker
(:mod:`sdk.cli.broker_read`: no group offset is created or moved). The output is the same.
"""

from __future__ import annotations

import argparse
import base64
from typing import TYPE_CHECKING, Any

from sdk.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Subparsers,
    add_json_option,
    add_target_options,
    emit_json,
    existing_queues,
    is_read_only,
    non_negative_int,
    open_store_for_reading,
    positive_int,
    warn,
)
from sdk.cli.progress import ProgressLine, progress_line

if TYPE_CHECKING:
    from localstore.record.codec import StoredMessage
    from localstore.record.tags import TagFilter
    from sdk.cli.common import ReadableStore

GET_BATCH = 32
HUMAN_BODY_CHARS = 120
_SHOWN_AS_FIELDS = frozenset({"TAGS", "KEYS", "UNIQ_KEY"})


def add_parser(subparsers: Subparsers) -> None:
    """Add ``read``."""
    parser = subparsers.add_parser(
        "read",
        help="read messages",
        description="Read messages of a topic, queue by queue, from each queue's min offset "
        "(or --from-offset).",
    )
    add_target_options(parser)
    parser.add_argument("--topic", required=True, metavar="T")
    parser.add_argument(
        "--queue",
        type=non_negative_int,
        metavar="N",
        help="read only this queue (default: every queue of the topic)",
    )
    parser.add_argument(
        "--from-offset",
        type=non_negative_int,
        metavar="N",
        help="queue offset to start at (default: the queue's min offset)",
    )
    parser.add_argument(
        "--max",
        type=positive_int,
        metavar="N",
        help="read at most N messages in total (default: all)",
    )
    parser.add_argument("--tags", metavar="EXPR", help="tag filter: TagA || TagB, or * (all)")
    add_json_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Read and print the messages."""
    from localstore.record.tags import TagFilter

    try:
        tag_filter = TagFilter.parse(args.tags)
    except ValueError as exc:
        raise CliError(f"--tags: {exc}", EXIT_USAGE) from exc
    if args.broker is not None:
        return _run_on_broker(args)
    remaining = args.max if args.max is not None else -1
    total = 0
    with progress_line(args, results_on_stdout=True) as progress:
        progress.status(f"opening store {args.data}")
        with open_store_for_reading(args.data) as store:
            queue_ids = existing_queues(store, args.topic, args.queue)
            reading = _Reading(
                progress, _expected_count(store, args, queue_ids), is_read_only(store)
            )
            for queue_id in queue_ids:
                count = _read_queue(store, args, queue_id, tag_filter, remaining, reading)
                total += count
                if remaining > 0:
                    remaining -= count
                    if remaining == 0:
                        break
    _summary(args, total, queue_ids)
    return EXIT_OK


def _summary(args: argparse.Namespace, total: int, queue_ids: list[int]) -> None:
    if not args.json:
        queues = ", ".join(map(str, queue_ids)) or "none"
        print(f"read {total} message(s) from {args.topic} (queues {queues})")


def _run_on_broker(args: argparse.Namespace) -> int:
    """:func:`run` on the broker at ``--broker URL``: each queue pulled from its min offset
    (or ``--from-offset``), committing nothing."""
    from sdk.cli.admin_access import admin_for
    from sdk.cli.broker_read import broker_queue_ids, read_broker_queue

    remaining = args.max if args.max is not None else -1
    total = 0
    with progress_line(args, results_on_stdout=True) as progress, admin_for(args) as admin:
        progress.status(f"asking the broker at {args.broker}")
        transport = admin.transport
        queue_ids = broker_queue_ids(admin, args.broker, args.topic, args.queue)
        starts = {q: _start(args, q, transport.min_offset(args.topic, q)) for q in queue_ids}
        expected = None
        if args.tags is None:
            expected = sum(
                max(transport.max_offset(args.topic, q) - start, 0) for q, start in starts.items()
            )
            expected = expected if args.max is None else min(expected, args.max)
        reading = _Reading(progress, expected, read_only=False)

        def show(messages: list[StoredMessage]) -> None:
            for message in messages:
                print_message(message, args.json)
            reading.add(len(messages))

        for queue_id, start in starts.items():
            count = read_broker_queue(
                transport,
                args.topic,
                queue_id,
                start,
                tags=args.tags,
                remaining=remaining,
                batch=GET_BATCH,
                show=show,
            )
            total += count
            if remaining > 0:
                remaining -= count
                if remaining == 0:
                    break
    _summary(args, total, queue_ids)
    return EXIT_OK


def _start(args: argparse.Namespace, queue_id: int, low: int) -> int:
    """Where to read ``queue_id`` from: ``--from-offset``, raised to the queue's min offset
    ``low`` (said on stderr), or ``low``."""
    if args.from_offset is None:
        return low
    if args.from_offset < low:
        warn(f"{args.topic}/{queue_id} starts at offset {low}; reading from there")
        return low
    return int(args.from_offset)


class _Reading:
    """How many messages the whole command has printed, shown on the progress line, and
    whether they come from a read-only view (said in each JSON line)."""

    def __init__(self, progress: ProgressLine, expected: int | None, read_only: bool):
        self.progress = progress
        self.expected = expected
        self.read_only = read_only
        self.printed = 0

    def add(self, count: int) -> None:
        self.printed += count
        self.progress.update("read messages", self.printed, self.expected)


def _expected_count(
    store: ReadableStore, args: argparse.Namespace, queue_ids: list[int]
) -> int | None:
    """How many messages the command will print, None when a tag filter makes it unknown."""
    if args.tags is not None:
        return None
    expected = 0
    for queue_id in queue_ids:
        start = max(store.min_offset(args.topic, queue_id), args.from_offset or 0)
        expected += max(store.max_offset(args.topic, queue_id) - start, 0)
    return expected if args.max is None else min(expected, args.max)


def _read_queue(
    store: ReadableStore,
    args: argparse.Namespace,
    queue_id: int,
    tag_filter: TagFilter,
    remaining: int,
    reading: _Reading,
) -> int:
    """Print messages of one queue; at most ``remaining`` (-1: all). Returns how many."""
    from localstore.record.codec import RecordError
    from localstore.results import GetStatus

    topic = args.topic
    low = store.min_offset(topic, queue_id)
    offset = low if args.from_offset is None else args.from_offset
    if offset < low:
        warn(f"{topic}/{queue_id} starts at offset {low}; reading from there")
        offset = low
    printed = 0
    while remaining != 0:
        want = GET_BATCH if remaining < 0 else min(GET_BATCH, remaining)
        try:
            result = store.get_messages(topic, queue_id, offset, max_count=want, tags=tag_filter)
        except RecordError as exc:
            raise CliError(f"cannot read {topic}/{queue_id} at offset {offset}: {exc}") from exc
        if result.status not in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE):
            break
        for message in result.messages:
            print_message(message, args.json, read_only=reading.read_only)
        printed += len(result.messages)
        reading.add(len(result.messages))
        if remaining > 0:
            remaining -= len(result.messages)
        if result.next_offset <= offset:
            break
        offset = result.next_offset
    return printed


def message_json(message: StoredMessage) -> dict[str, Any]:
    """A stored message as a JSON-ready dict; the body as UTF-8 text, else base64."""
    try:
        body, encoding = message.body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(message.body).decode("ascii"), "base64"
    return {
        "topic": message.topic,
        "queue_id": message.queue_id,
        "queue_offset": message.queue_offset,
        "phys_offset": message.phys_offset,
        "msg_id": message.msg_id,
        "offset_msg_id": message.offset_msg_id,
        "tags": message.tags,
        "keys": message.keys,
        "properties": message.properties,
        "body": body,
        "body_encoding": encoding,
        "store_size": message.store_size,
        "flag": message.flag,
        "sys_flag": message.sys_flag,
        "born_timestamp": message.born_timestamp,
        "store_timestamp": message.store_timestamp,
        "born_host": message.born_host,
        "store_host": message.store_host,
        "reconsume_times": message.reconsume_times,
    }


def print_message(message: StoredMessage, as_json: bool, *, read_only: bool = False) -> None:
    """One message: a JSON line (with ``"read_only": true`` when read from a read-only view
    of a held store), or a human-readable line."""
    if as_json:
        emit_json(
            {**message_json(message), "read_only": True} if read_only else message_json(message)
        )
        return
    try:
        text = repr(message.body.decode("utf-8"))
    except UnicodeDecodeError:
        text = f"base64:{base64.b64encode(message.body[:HUMAN_BODY_CHARS]).decode()}"
    if len(text) > HUMAN_BODY_CHARS:
        text = text[:HUMAN_BODY_CHARS] + "..."
    fields = [
        f"{message.topic}/{message.queue_id}@{message.queue_offset}",
        f"msgId={message.msg_id}",
        f"offsetMsgId={message.offset_msg_id}",
    ]
    if message.tags is not None:
        fields.append(f"tags={message.tags}")
    if message.keys:
        fields.append(f"keys={','.join(message.keys)}")
    fields += [f"{k}={v}" for k, v in message.properties.items() if k not in _SHOWN_AS_FIELDS]
    fields.append(f"body({len(message.body)})={text}")
    print("  ".join(fields))
