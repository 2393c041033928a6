"""A real in-process transport whose broker refuses offset commits while told to (a fault the
embedded broker cannot be made to show otherwise)."""

from __future__ import annotations

from collections.abc import Mapping

from offsetstore import MessageQueue
from sdk.transport.base import BrokerTransport


class CommitsRefused:
    """The real transport, except that the broker refuses commits while ``refusing``."""

    def __init__(self, real: BrokerTransport) -> None:
        self.real = real
        self.refusing = False

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)

    def commit_offsets(
        self, broker_name: str, group: str, offsets: Mapping[MessageQueue, int]
    ) -> None:
        if self.refusing:
            raise ValueError("commit refused")  # not retriable: kept for the next persist
        self.real.commit_offsets(broker_name, group, offsets)
