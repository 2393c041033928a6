"""Which asyncio event loop the broker server and the remote benchmarks run on:
``--loop auto|uvloop|asyncio``.

``auto`` (the default) takes uvloop when it is installed (``pip install 'quiver[uvloop]'``) and
the standard library's loop otherwise; ``uvloop`` insists on it (a usage error when it is
missing); ``asyncio`` always takes the standard loop. uvloop runs the loop's callbacks, its
sockets and its timers in C: the broker server and the remote benchmarks spend most of their
time there (HTTP parsing, socket writes, futures), so it is what a deployment would pick.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from sdk.errors import InvalidArgumentError

__all__ = ["LOOP_CHOICES", "add_loop_option", "loop_factory", "run"]

T = TypeVar("T")

LOOP_CHOICES = ("auto", "uvloop", "asyncio")


def add_loop_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Add ``--loop auto|uvloop|asyncio`` (read as ``args.loop``)."""
    parser.add_argument(
        "--loop",
        choices=LOOP_CHOICES,
        default="auto",
        help="the event loop: uvloop when installed (auto), or the one named",
    )


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory of the loop ``choice`` names (None: asyncio's default loop). Raises
    :class:`~sdk.errors.InvalidArgumentError` (a usage error to the CLI) when ``uvloop`` is
    asked for and not installed, or ``choice`` is unknown."""
    if choice not in LOOP_CHOICES:
        raise InvalidArgumentError(f"--loop {choice!r}: want one of {', '.join(LOOP_CHOICES)}")
    if choice == "asyncio":
        return None
    if importlib.util.find_spec("uvloop") is None:
        if choice == "uvloop":
            raise InvalidArgumentError(
                "--loop uvloop: uvloop is not installed (pip install 'quiver[uvloop]')"
            )
        return None
    import uvloop  # noqa: PLC0415 (optional dependency)

    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Callable[[], Coroutine[Any, Any, T]], choice: str) -> T:
    """``asyncio.run(main())`` on the loop ``choice`` names (see :func:`loop_factory`); the
    coroutine is made once the loop is known to exist."""
    factory = loop_factory(choice)
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main())
