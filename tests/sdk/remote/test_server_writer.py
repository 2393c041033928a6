"""The broker server's one writer (:mod:`sdk.server.writer`): a small append runs on the loop
only when it may and the writer thread is idle; otherwise it queues behind the thread's calls,
so appends keep the order their requests came in."""

from __future__ import annotations

import asyncio
import threading

import pytest

from sdk.errors import BrokerUnavailableError
from sdk.server.writer import Writer


def _thread_name() -> str:
    return threading.current_thread().name


def test_a_small_append_runs_on_the_loop_when_the_thread_is_idle() -> None:
    async def main() -> tuple[str, str]:
        writer = Writer(inline_allowed=True)
        try:
            return await writer.run(_thread_name, inline=True), await writer.run(_thread_name)
        finally:
            writer.shutdown()

    inline, queued = asyncio.run(main())
    assert inline == threading.current_thread().name
    assert queued.startswith("quiver-writer")


def test_no_append_runs_on_the_loop_when_the_writer_forbids_it() -> None:
    async def main() -> str:
        writer = Writer(inline_allowed=False)  # a store under sync flush
        try:
            return await writer.run(_thread_name, inline=True)
        finally:
            writer.shutdown()

    assert asyncio.run(main()).startswith("quiver-writer")


def test_a_small_append_waits_behind_the_calls_queued_on_the_thread() -> None:
    order: list[str] = []
    release = threading.Event()

    def slow() -> str:
        assert release.wait(30)
        order.append("slow")
        return _thread_name()

    def small() -> str:
        order.append("small")
        return _thread_name()

    async def main() -> tuple[str, str]:
        writer = Writer(inline_allowed=True)
        try:
            first = asyncio.ensure_future(writer.run(slow))
            await asyncio.sleep(0)  # the slow call is handed to the thread
            second = asyncio.ensure_future(writer.run(small, inline=True))
            await asyncio.sleep(0)
            release.set()
            return await first, await second
        finally:
            writer.shutdown()

    first_thread, second_thread = asyncio.run(main())
    assert order == ["slow", "small"]
    assert first_thread.startswith("quiver-writer")
    assert second_thread.startswith("quiver-writer")


def test_a_shut_down_writer_refuses_calls_as_a_closing_broker() -> None:
    async def main() -> None:
        writer = Writer(inline_allowed=True)
        writer.shutdown()
        with pytest.raises(BrokerUnavailableError):
            await writer.run(_thread_name, inline=True)
        with pytest.raises(BrokerUnavailableError):
            await writer.run(_thread_name)

    asyncio.run(main())
