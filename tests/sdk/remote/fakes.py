"""What the HTTP transport tests share: a clock that only moves when the retry policy sleeps
(so retry deadlines are checked without waiting), canned answers, and a message to send."""

from __future__ import annotations

import orjson

from localstore.record.codec import NewMessage
from sdk.protocol.errors import error_answer
from sdk.protocol.shapes import SEND_RESULT
from sdk.transport.models import SendResult


class FakeTime:
    """``clock()`` and ``sleep(s)`` for :class:`~sdk.transport.http_common.RetryPolicy`:
    sleeping moves the clock, and every pause is recorded."""

    def __init__(self) -> None:
        self.now_s = 1000.0
        self.sleeps_s: list[float] = []

    def clock(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.sleeps_s.append(seconds)
        self.now_s += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)


def send_result_body(queue_offset: int = 0) -> bytes:
    result = SendResult("PUT_OK", topic="Orders", queue_id=1, queue_offset=queue_offset)
    return orjson.dumps(SEND_RESULT.encode(result))


def error_body(error: Exception) -> tuple[int, bytes]:
    return error_answer(error)


def message(queue_id: int = 1, body: bytes = b"hello") -> NewMessage:
    return NewMessage("Orders", body, queue_id=queue_id, born_timestamp=1_700_000_000_000)
