"""The step drivers (sdk.transport.steps): one sequence, run on a blocking or an asyncio transport,
answers and failures delivered into it, and closed when its runner stops."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sdk.transport.steps import Call, Pause, Steps, run_steps, run_steps_async


class Blocking:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def double(self, value: int, *, plus: int = 0) -> int:
        self.calls.append(("double", (value,), {"plus": plus}))
        return 2 * value + plus

    def fail(self) -> None:
        self.calls.append(("fail", (), {}))
        raise ConnectionError("broker away")


class Asynchronous:
    def __init__(self) -> None:
        self.blocking = Blocking()
        self.parked = asyncio.Event()

    async def double(self, value: int, *, plus: int = 0) -> int:
        return self.blocking.double(value, plus=plus)

    async def fail(self) -> None:
        self.blocking.fail()

    async def park(self) -> None:
        self.parked.set()
        await asyncio.sleep(60)


def sequence(log: list[str]) -> Steps[int]:
    first: int = yield Call.of("double", 3)
    second: int = yield Call.of("double", first, plus=1)
    try:
        yield Call.of("fail")
    except ConnectionError as exc:
        log.append(f"caught {exc}")
    yield Pause(0)
    return second


def test_the_blocking_driver_answers_each_call_and_throws_its_failure_in() -> None:
    log: list[str] = []
    transport = Blocking()
    assert run_steps(sequence(log), transport) == 13  # type: ignore[arg-type]
    assert [c[0] for c in transport.calls] == ["double", "double", "fail"]
    assert transport.calls[1] == ("double", (6,), {"plus": 1})
    assert log == ["caught broker away"]


def test_the_async_driver_runs_the_same_sequence_on_the_loop() -> None:
    log: list[str] = []
    transport = Asynchronous()
    result = asyncio.run(run_steps_async(sequence(log), transport))  # type: ignore[arg-type]
    assert result == 13
    assert [c[0] for c in transport.blocking.calls] == ["double", "double", "fail"]
    assert log == ["caught broker away"]


def test_an_uncaught_failure_reaches_the_caller() -> None:
    def failing() -> Steps[None]:
        yield Call.of("fail")

    with pytest.raises(ConnectionError, match="broker away"):
        run_steps(failing(), Blocking())  # type: ignore[arg-type]


def test_a_cancelled_async_run_closes_the_sequence() -> None:
    cleaned: list[str] = []

    def parked() -> Steps[None]:
        try:
            yield Call.of("park")
            cleaned.append("went on")  # never: the call was cancelled
        finally:
            cleaned.append("closed")

    async def scenario() -> None:
        transport = Asynchronous()
        task = asyncio.create_task(run_steps_async(parked(), transport))  # type: ignore[arg-type]
        await transport.parked.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert cleaned == ["closed"]
