"""The produce loop of ``quiver produce --broker URL``: sends batches through :class:`sdk.Producer`
and prints each message's outcome as the store's produce loop (:mod:`sdk.cli.producer`) does.

The producer gives each message its ``UNIQ_KEY`` and picks each batch's queue round-robin over
the topic's write queues (or ``--queue``); a batch is one request, stored all or none.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sdk.cli.common import EXIT_FAILED, CliError
from sdk.cli.producer import StoredLine, stored_line, summary_line
from sdk.errors import SendRejectedError

if TYPE_CHECKING:
    from sdk.outgoing import SendReceipts
    from sdk.producer import Producer


class BrokerProducer:
    """Builds :class:`sdk.Message` objects, sends them in batches, prints each outcome."""

    def __init__(
        self,
        producer: Producer,
        topic: str,
        properties: dict[str, str],
        queue: int | None,
        as_json: bool,
        *,
        verbose: bool,
    ):
        self.producer = producer
        self.topic = topic
        self.tags = properties.get("TAGS")
        self.keys = properties["KEYS"].split(" ") if "KEYS" in properties else []
        self.properties = {k: v for k, v in properties.items() if k not in ("TAGS", "KEYS")}
        self.fixed_queue = queue
        self.as_json = as_json
        self.verbose = verbose
        self.stored = 0
        self.bytes = 0
        self.started = time.monotonic()
        self.per_queue: dict[int, int] = {}

    def send(self, bodies: list[bytes], batch: int) -> None:
        """Send ``bodies`` in batches of ``batch``; print each message's outcome."""
        from sdk.message import Message

        messages = [
            Message(self.topic, body, tags=self.tags, keys=self.keys, properties=self.properties)
            for body in bodies
        ]
        for start in range(0, len(messages), batch):
            part = messages[start : start + batch]
            try:
                receipts = self.producer.send_batch(part, queue_id=self.fixed_queue)
            except SendRejectedError as exc:
                raise CliError(
                    f"send to {self.topic} failed: {exc} ({self.stored} message(s) stored before)",
                    EXIT_FAILED,
                ) from exc
            self._stored(receipts, sum(len(message.body) for message in part))

    def _stored(self, receipts: SendReceipts, body_bytes: int) -> None:
        self.stored += len(receipts)
        self.bytes += body_bytes
        for receipt in receipts:
            self.per_queue[receipt.queue_id] = self.per_queue.get(receipt.queue_id, 0) + 1
            if self.as_json or self.verbose:
                line = StoredLine(
                    receipt.msg_id,
                    receipt.offset_msg_id,
                    receipt.topic,
                    receipt.queue_id,
                    receipt.queue_offset,
                    receipt.phys_offset,
                    receipt.status,
                    receipt.store_timestamp,
                )
                print(stored_line(line, self.as_json))

    def summary(self) -> str:
        """One line: how many messages went where, how fast."""
        return summary_line(self.topic, self.stored, self.bytes, self.per_queue, self.started)
