"""Clients take a transport as well as an embedded broker (remote mode plugs its HTTP transports
in this way): an asyncio client takes an asyncio transport, every operation a coroutine, and
needs nothing else of it; a blocking client refuses one, whose answers would be coroutines."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sdk import AsyncProducer, EmbeddedBroker, Message, Producer
from sdk.errors import ArgumentTypeError
from sdk.transport.resolve import resolve, resolve_async

TOPIC = "Resolved"


def test_an_async_client_takes_an_async_transport(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as broker:
        transport = broker.async_transport()
        assert resolve_async(transport) is transport

        async def send() -> str:
            async with AsyncProducer(transport) as producer:
                return (await producer.send(Message(TOPIC, b"x"))).status

        assert asyncio.run(send()) == "PUT_OK"


def test_a_blocking_client_refuses_an_async_transport(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as broker:
        assert resolve(broker.transport()) is not None
        with pytest.raises(ArgumentTypeError, match="asyncio transport"):
            Producer(broker.async_transport())
        with pytest.raises(ArgumentTypeError, match="blocking transport"):
            resolve_async(broker.transport())
