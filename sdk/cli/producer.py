"""The produce loop of ``quiver produce``: builds messages, assigns queues, puts batches."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sdk.cli.common import EXIT_FAILED, CliError, json_line

if TYPE_CHECKING:
    from localstore.record.codec import NewMessage
    from localstore.results import PutResult
    from localstore.store import MessageStore


class Producer:
    """Builds messages, assigns queues, puts batches, prints the outcome of each message."""

    def __init__(
        self,
        store: MessageStore,
        topic: str,
        properties: dict[str, str],
        queue: int | None,
        as_json: bool,
        *,
        verbose: bool,
    ):
        from localstore.record.message_id import UniqKeyGenerator

        self.store = store
        self.topic = topic
        self.properties = properties
        self.fixed_queue = queue
        self.as_json = as_json
        self.verbose = verbose
        self.ids = UniqKeyGenerator()
        self.stored = 0
        self.bytes = 0
        self.started = time.monotonic()
        self.per_queue: dict[int, int] = {}
        self._next_queue = -1 if queue is None else queue

    def queue_count(self) -> int:
        """The topic's write queues (the store's default for a topic not created yet)."""
        if self.fixed_queue is not None:
            return 1
        config = self.store.topics.get(self.topic)
        return config.write_queue_nums if config else self.store.options.default_queue_count

    def _pick_queue(self) -> int:
        if self.fixed_queue is not None:
            return self.fixed_queue
        count = self.queue_count()
        if self._next_queue < 0:  # start at the least-filled queue
            self._next_queue = min(
                range(count), key=lambda q: (self.store.max_offset(self.topic, q), q)
            )
        queue = self._next_queue % count
        self._next_queue = queue + 1
        return queue

    def send(self, bodies: list[bytes], batch: int) -> None:
        """Put ``bodies`` (one put per queue per ``batch``); print each message's outcome."""
        from localstore.record.codec import NewMessage

        groups: dict[int, list[tuple[int, NewMessage]]] = {}
        now = time.time_ns() // 1_000_000
        for index, body in enumerate(bodies):
            properties = {**self.properties, "UNIQ_KEY": self.ids.next()}
            queue = self._pick_queue()
            message = NewMessage(self.topic, body, queue, properties, born_timestamp=now)
            groups.setdefault(queue, []).append((index, message))
        lines: list[tuple[int, str]] = []
        failure: PutResult | None = None
        for members in groups.values():
            for start in range(0, len(members), batch):
                part = members[start : start + batch]
                result = self.store.put_batch([message for _, message in part])
                if result.status.stored:
                    lines += self._stored(part, result)
                if not result.ok:
                    failure = result
                    break
            if failure is not None:
                break
        for _, line in sorted(lines):
            print(line)
        if failure is not None:
            detail = f"{failure.status.value}: {failure.detail}"
            raise CliError(
                f"put to {self.topic}/{failure.queue_id} failed with {detail} "
                f"({self.stored} message(s) stored before)",
                EXIT_FAILED,
            )

    def _stored(
        self, part: list[tuple[int, NewMessage]], result: PutResult
    ) -> list[tuple[int, str]]:
        """Count a stored batch; its output lines, tagged with the messages' indexes."""
        self.stored += len(part)
        self.bytes += sum(len(message.body) for _, message in part)
        self.per_queue[result.queue_id] = self.per_queue.get(result.queue_id, 0) + len(part)
        if not (self.as_json or self.verbose):
            return []
        ids = result.offset_msg_ids
        return [
            (index, self._line(message.properties["UNIQ_KEY"], result, position, ids[position]))
            for position, (index, message) in enumerate(part)
        ]

    def _line(self, msg_id: str, result: PutResult, position: int, offset_msg_id: str) -> str:
        return stored_line(
            StoredLine(
                msg_id,
                offset_msg_id,
                self.topic,
                result.queue_id,
                result.queue_offset + position,
                result.phys_offsets[position],
                result.status.value,
                result.store_timestamp,
            ),
            self.as_json,
        )

    def summary(self) -> str:
        """One line: how many messages went where, how fast."""
        return summary_line(self.topic, self.stored, self.bytes, self.per_queue, self.started)


@dataclass(frozen=True, slots=True)
class StoredLine:
    """Where one produced message was stored, as ``quiver produce`` prints it."""

    msg_id: str
    offset_msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    status: str
    store_timestamp: int


def stored_line(stored: StoredLine, as_json: bool) -> str:
    """One produced message's output line: human-readable, or a JSON object."""
    if not as_json:
        return (
            f"{stored.status} {stored.topic}/{stored.queue_id}@{stored.queue_offset} "
            f"msgId={stored.msg_id} offsetMsgId={stored.offset_msg_id} phys={stored.phys_offset}"
        )
    return json_line(
        {
            "msg_id": stored.msg_id,
            "offset_msg_id": stored.offset_msg_id,
            "topic": stored.topic,
            "queue_id": stored.queue_id,
            "queue_offset": stored.queue_offset,
            "phys_offset": stored.phys_offset,
            "status": stored.status,
            "store_timestamp": stored.store_timestamp,
        }
    )


def summary_line(
    topic: str, stored: int, body_bytes: int, per_queue: dict[int, int], started: float
) -> str:
    """One line: how many messages went where (``per_queue``), how fast since ``started``
    (a ``time.monotonic()``)."""
    elapsed = max(time.monotonic() - started, 1e-9)
    queues = ", ".join(f"{q}: {n}" for q, n in sorted(per_queue.items()))
    return (
        f"produced {stored} message(s), {body_bytes} body bytes, to {topic} "
        f"(queues {queues or 'none'}) in {elapsed:.2f} s: {stored / elapsed:,.0f} "
        f"msg/s, {body_bytes / elapsed / 1e6:,.1f} MB/s"
    )
