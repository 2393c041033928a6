"""How ``PushConsumer.run()`` and ``AsyncPushConsumer.run()`` stop on SIGINT or SIGTERM.

The threaded ``run()`` installs a :class:`OneStopSignal` as the process's handler: it raises
:class:`StopSignal` in the main thread once, ending ``run()``'s wait, and ignores later signals
until ``run()`` has put the previous handlers back. The asyncio ``run()`` uses the loop's signal
handlers instead, which settle a future (:func:`settle_once`).
"""

from __future__ import annotations

import asyncio
import signal
from types import FrameType

__all__ = ["STOP_SIGNALS", "OneStopSignal", "StopSignal", "settle_once"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignal(BaseException):
    """Raised in the main thread by :meth:`PushConsumer.run`'s signal handler, to end its wait."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signal_name = signal.Signals(signum).name


class OneStopSignal:
    """``run``'s handler of SIGINT and SIGTERM: raises :class:`StopSignal` once, then ignores
    signals until the previous handlers are back. Raising is all it does: setting an Event would
    take the Event's lock, which the interrupted main thread may hold."""

    def __init__(self) -> None:
        self._armed = True

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        if self._armed:
            self._armed = False
            raise StopSignal(signum)

    def disarm(self) -> None:
        """No more raising; a signal that raises while this is being called is swallowed."""
        # Not contextlib.suppress: a signal could come before its __enter__ ran.
        try:  # noqa: SIM105
            self._armed = False
        except StopSignal:
            pass


def settle_once(received: asyncio.Future[signal.Signals], sig: signal.Signals) -> None:
    """``AsyncPushConsumer.run``'s loop signal handler: the first signal settles ``received``."""
    if not received.done():
        received.set_result(sig)
