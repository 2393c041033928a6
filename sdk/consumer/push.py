"""Push consumers: the broker's messages delivered to a listener, concurrently.

:class:`PushConsumer` runs one pull thread, a pool of listener threads and two keeper threads
(lease renewal, offset persist); its asyncio twin :class:`AsyncPushConsumer` runs the same as
tasks of the event loop and starts no thread. Both leave every decision to
:class:`sdk.consumer.push_core.PushCore` (assignment, flow control, send-back, offsets), which
does no I/O: what needs the broker it writes as steps (:mod:`sdk.transport.steps`), which each
shell runs on its own transport (blocking, or awaited). So they behave the same, and a new
transport (HTTP) serves both.

The pull thread holds one long-polling request over all owned queues at a time: it costs no CPU
while nothing arrives and answers as soon as a message does. Listener batches are handed to the
pool as they are cut; a batch's outcome decides the queue's committed offset (the smallest
offset still in flight), never the order in which batches finish.

Listener contract: ``listener(messages) -> ConsumeResult``; ``None`` (returning nothing) counts as
SUCCESS; raising counts as RECONSUME_LATER; any other value (``True``, ``"ok"``, ``1``) is a
programming error, logged at ERROR, and the batch is retried (:func:`sdk.message.read_answer`).
The same message may be delivered more than once (at-least-once): make the listener idempotent
(:mod:`sdk.idempotency`). The listener's kind is checked when the consumer is built:
:class:`PushConsumer` takes a plain callable, :class:`AsyncPushConsumer` an ``async def`` one
(see :func:`check_listener`).

Closing hands every queue over as a rebalance does: pulling stops, the listener calls already
running finish (at most ``close(timeout_s)``, by default ``release_timeout_s``), their results
are committed and persisted, and only then are the queues' leases given back and the group left.
A call still running then commits nothing (its messages are delivered again) and never keeps
the process from exiting: :class:`PushConsumer`'s listener threads are daemon threads
(:mod:`sdk.consumer.daemon_pool`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future
from threading import current_thread
from types import TracebackType
from typing import Any, Self, TypeVar, Unpack

from offsetstore import MessageQueue
from offsetstore.memory import PeriodicPersister
from sdk.clock import SYSTEM_CLOCK, Clock
from sdk.consumer.daemon_pool import DaemonThreadPool
from sdk.consumer.damaged import ConsumerStats
from sdk.consumer.membership import check_group, check_subscription, new_client_id
from sdk.consumer.process_queue import ProcessQueue
from sdk.consumer.push_core import PushCore, PushOptions, PushSettings, Work
from sdk.consumer.stop_signals import STOP_SIGNALS, OneStopSignal, StopSignal, settle_once
from sdk.errors import (
    ArgumentTypeError,
    ClientClosedError,
    IllegalStateError,
    InvalidArgumentError,
)
from sdk.lifecycle import WarnsUnclosed
from sdk.message import ConsumeResult, ReceivedMessage, is_async_callable, read_answer
from sdk.transport.base import AsyncBrokerTransport, BrokerTransport
from sdk.transport.resolve import owns_transport, resolve, resolve_async
from sdk.transport.steps import Steps, run_steps, run_steps_async

__all__ = ["AsyncPushConsumer", "Listener", "PushConsumer", "check_listener"]

log = logging.getLogger(__name__)

Listener = Callable[[list[ReceivedMessage]], ConsumeResult | None]
AsyncListener = Callable[[list[ReceivedMessage]], Awaitable[ConsumeResult | None]]

_ERROR_PAUSE_S = 3.0  # and after a failed pull, 3 s
_LOCAL_RETRY_S = 5.0  # a message whose send-back failed is re-consumed locally after 5 s
# A lone batch runs on the pull thread when the pool is idle and listener calls lately took
# less than this (pulling pauses meanwhile, so only for listeners this quick).
_INLINE_LISTENER_S = 0.0005
# What a listener call in flight holds: its queue and its batch (None: an orderly runner's,
# whose current batch it takes itself).
_InFlight = tuple[MessageQueue, list[ReceivedMessage] | None]


T = TypeVar("T")
# The consumer's committed offsets are persisted this often (and at once where they must be:
# a queue let go of, close), as RocketMQ's persistConsumerOffsetInterval.
OFFSET_PERSIST_INTERVAL_S = 5.0


def check_listener(listener: object, *, asynchronous: bool) -> None:
    """Refuse, with TypeError, a listener the consumer could not run: one that is not
    callable, an ``async def`` one given to :class:`PushConsumer` (it would only get coroutines
    back, never run the body, and dead-letter every message), or a plain one given to
    :class:`AsyncPushConsumer` (it would run the body, then fail to await its answer, and
    redeliver every message up to the dead-letter queue).

    The kind is what :mod:`inspect` tells (:func:`sdk.message.is_async_callable`). A plain
    callable that returns an awaitable (a decorator's wrapper, say) looks synchronous to it:
    mark it with :func:`inspect.markcoroutinefunction` (Python 3.12+) or wrap it in an ``async def``
    to give it to :class:`AsyncPushConsumer`."""
    if not callable(listener):
        raise ArgumentTypeError(f"the listener must be callable, got {listener!r}")
    is_async = is_async_callable(listener)
    if asynchronous and not is_async:
        raise ArgumentTypeError(
            f"AsyncPushConsumer needs an async def listener (a coroutine function), got "
            f"{listener!r}, which is not one: give a blocking listener to PushConsumer"
        )
    if not asynchronous and is_async:
        raise ArgumentTypeError(
            f"PushConsumer calls its listener synchronously, and {listener!r} is an async def "
            f"(coroutine) function: give it to AsyncPushConsumer"
        )


def _outcome(answer: object, group: str, messages: list[ReceivedMessage]) -> ConsumeResult:
    """What a listener's ``answer`` for ``messages`` means (:func:`sdk.message.read_answer`):
    ``None`` or SUCCESS succeeds; any value that is not a ConsumeResult is logged at ERROR
    with the group and the message ids, and the batch is retried."""
    return read_answer(answer, lambda: f"listener of {group}", messages)


class PushConsumer(WarnsUnclosed):
    """Consumes ``subscription`` (``{topic: tag expression or None}``) for ``group``, calling
    ``listener`` with batches of messages on a pool of ``consume_threads`` threads.

    ``broker``: a broker URL (``"http://host:8080"``: remote mode, over a transport the consumer
    makes and closes), an :class:`sdk.EmbeddedBroker` (local mode) or a transport. Every other
    setting is a :class:`PushSettings` field (message model, ``consume_from``, batch sizes,
    flow control, max reconsume times, consume timeout, allocation strategy, ...), given as a
    keyword. Starts on :meth:`start` or entering ``with``; :meth:`close` (or leaving ``with``)
    waits for running listeners (at most its ``timeout_s``, by default ``release_timeout_s``),
    persists offsets and leaves the group. ``listener`` must be a plain callable (TypeError for
    an ``async def`` one: use :class:`AsyncPushConsumer`).

    The listener's answer for its batch: ``ConsumeResult.SUCCESS`` or ``None`` (a function that
    returns nothing) succeeds; ``ConsumeResult.RECONSUME_LATER`` or raising fails the batch
    (sent back for a later retry; an orderly consumer retries it in place). Any other value
    (``True``, ``"ok"``, ``1``, ...) is a programming error: it is logged at ERROR with its repr,
    the group and the message ids, and the batch is retried as for ``RECONSUME_LATER``.

    ``stats`` (:class:`~sdk.consumer.damaged.ConsumerStats`) counts what the consumer met:
    ``stats.damaged_skipped`` is the number of damaged records it stepped over (each logged at
    ERROR with topic, queue, queue offset and commitlog offset; the queue goes on after it).
    """

    def __init__(
        self,
        broker: object,
        group: str,
        subscription: Mapping[str, str | None],
        listener: Listener,
        *,
        consume_threads: int = 8,
        clock: Clock = SYSTEM_CLOCK,
        **settings: Unpack[PushOptions],
    ) -> None:
        subscription = check_subscription(subscription)
        if type(consume_threads) is not int or consume_threads < 1:
            raise InvalidArgumentError(f"consume_threads must be >= 1, got {consume_threads!r}")
        check_listener(listener, asynchronous=False)
        self.group = check_group(group)
        self.listener = listener
        self.settings = PushSettings(**settings)
        self.client_id = new_client_id(self.settings.instance_name)
        self._clock = clock
        self._transport: BrokerTransport = resolve(broker)
        self._owns_transport = owns_transport(broker)
        # Serialises the core's membership sequences (rebalance, settle, lease renewal, the
        # periodic persist, expiry, shutdown) across the pull, keeper and closing threads;
        # ``_control_thread`` is the thread running one (a rebalance listener runs inside it).
        self._control = threading.Lock()
        self._control_thread: int | None = None
        self._subscription = dict(subscription)
        self._consume_threads = consume_threads
        self._core: PushCore | None = None
        # What the consumer counts (damaged records it stepped over), kept across restarts.
        self.stats = ConsumerStats()
        self._pool: DaemonThreadPool | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._close_done = threading.Event()  # set once close() has run every step
        self._timers: set[threading.Timer] = set()
        self._timers_lock = threading.Lock()
        self._keepers: list[PeriodicPersister] = []  # lease renewal, offset persist
        # What runs on the pool (listener batches, orderly runners), submitted and not finished,
        # with the work each holds (a batch's queue and messages, an orderly runner's queue);
        # close() waits for these. The lock also orders submitting against closing the pool.
        self._on_pool: dict[Future[None], _InFlight] = {}
        self._inline: _InFlight | None = None  # the batch the pull thread runs itself
        self._on_pool_lock = threading.Lock()
        self._pool_open = False
        # Held by the pull thread while it hands a pull's batches out, which includes running a
        # lone batch's listener call itself: close() takes it to wait for that call.
        self._dispatching = threading.Lock()
        # A moving average of the listener's call time; it starts slow, so a listener runs on
        # the pull thread only after a run of quick calls.
        self._listener_ewma_s = _INLINE_LISTENER_S * 20
        self._orderly_lock = threading.Lock()
        self._orderly_running: set[MessageQueue] = set()
        self._closed = False
        self._mark_opened()

    @property
    def core(self) -> PushCore:
        if self._core is None:
            raise ClientClosedError(f"push consumer of {self.group} is not started")
        return self._core

    def start(self) -> None:
        """Join the group, take this member's queues and start consuming."""
        if self._closed:
            raise ClientClosedError(f"push consumer of {self.group} is closed")
        if self._thread is not None:
            return
        core = _new_core(self, self._transport.broker_name)
        try:
            self._under_control(core.rebalance())
        except BaseException:
            self._under_control(core.shutdown())  # leave the group
            raise
        self._core = core
        self._keepers = [
            PeriodicPersister(
                f"quiver-leases-{self.group}",
                lambda: self._under_control(core.renew_leases()),
                self.settings.lease_renew_interval_s,
                what="lease renewal",
                until_false=True,
            ),
            PeriodicPersister(
                f"quiver-offsets-{self.group}",
                lambda: self._under_control(core.persist_owned()),
                OFFSET_PERSIST_INTERVAL_S,
                what="offset persist",
            ),
        ]
        self._pool = DaemonThreadPool(  # a call that never returns must not block exit
            self._consume_threads, thread_name_prefix=f"quiver-consume-{self.group}"
        )
        self._pool_open = True
        self._thread = threading.Thread(
            target=self._pull_loop, name=f"quiver-pull-{self.group}", daemon=True
        )
        self._thread.start()

    def assignment(self) -> list[MessageQueue]:
        """The queues this member consumes now (including the group's retry queue). Safe from
        any thread: the pull thread may change the assignment meanwhile."""
        return sorted(self.core.states.copy())  # copied at once: iterating could race a change

    def _run(self, steps: Steps[T]) -> T:
        """Make the broker calls ``steps`` asks for, on this thread."""
        return run_steps(steps, self._transport)

    def _under_control(self, steps: Steps[T]) -> T:
        """Run a membership sequence of the core, one at a time. Called from within one (a
        rebalance listener, on the thread that holds the control lock), it runs at once as
        part of that sequence: waiting for the lock would wait for itself."""
        if self._control_thread == threading.get_ident():
            return self._run(steps)
        with self._control:
            self._control_thread = threading.get_ident()
            try:
                return self._run(steps)
            finally:
                self._control_thread = None

    def persist_offsets(self) -> None:
        """Commit the offsets reached by the finished listener calls now (they are committed
        every 5 s and on close anyway): after this returns, a restart or another member
        resumes no earlier than them. A commit the broker cannot take is kept and sent again
        with the next. A rebalance listener may call it (it then runs inside the sequence that
        called the listener, which holds the control lock)."""
        self._under_control(self.core.persist_owned())

    # -- the pull thread ---------------------------------------------------------------------
    def _pull_loop(self) -> None:
        core = self.core
        while not self._stop.is_set():
            try:
                if core.housekeeping_due():
                    self._under_control(core.rebalance())
                elif core.ownership.settling:
                    self._under_control(core.settle())
                if core.expiry_check_due():
                    self._under_control(core.expire_stuck())
                batch = core.next_pull(core.hold_ms())
                result = self._transport.pull(batch)
                with self._dispatching:  # close() waits for this, listener call included
                    if self._stop.is_set():  # checked under the lock: nothing starts after it
                        return
                    works = core.on_pulled(batch, result)
                    if self.settings.orderly:
                        for queue in {work[0] for work in works}:
                            self._kick_orderly(queue)
                    elif len(works) == 1 and not self._on_pool and self._quick_listener():
                        self._inline = works[0][0], works[0][2]
                        try:  # nothing else runs: spare a thread hand-off
                            self._consume(*works[0])
                        finally:
                            self._inline = None
                    else:
                        for work in works:
                            self._submit(work)
                        # let a listener thread take the GIL now, not at our next wait
                        time.sleep(0)
                if result.generation != core.generation and not self._stop.is_set():
                    self._under_control(core.rebalance())
            except Exception as exc:
                if self._stop.is_set():
                    return
                log.warning(
                    "pull loop of %s: %s; retrying in %.0f s", self.group, exc, _ERROR_PAUSE_S
                )
                self._stop.wait(_ERROR_PAUSE_S)

    def _run_on_pool(self, task: Callable[..., None], holds: _InFlight, *args: object) -> bool:
        """Submit ``task(*args)`` to the pool, tracked (with the work it ``holds``) until it
        finishes; False once the consumer is closing (the batch's offsets stay put: it is
        consumed again later)."""
        with self._on_pool_lock:
            pool = self._pool
            if pool is None or not self._pool_open:
                return False
            try:
                future = pool.submit(task, *args)
            except RuntimeError:  # the interpreter is shutting down
                return False
            self._on_pool[future] = holds
        future.add_done_callback(self._off_pool)  # outside the lock: it may run at once
        return True

    def _off_pool(self, future: Future[None]) -> None:
        with self._on_pool_lock:
            self._on_pool.pop(future, None)

    def _submit(self, work: Work) -> None:
        self._run_on_pool(self._consume, (work[0], work[2]), *work)

    def _quick_listener(self) -> bool:
        """Whether recent listener calls were short enough to run one on the pull thread (a
        lone batch while the pool is idle: one thread hand-off less per message)."""
        return self._listener_ewma_s < _INLINE_LISTENER_S

    def _consume(
        self,
        queue: MessageQueue,
        process_queue: ProcessQueue[ReceivedMessage],
        messages: list[ReceivedMessage],
    ) -> None:
        core = self.core
        state = core.try_start(queue, process_queue, messages)
        if state is None:  # being handed over (its next owner consumes these) or taken back
            return
        started = time.perf_counter()
        try:
            answer = self.listener(messages)
            result = _outcome(answer, self.group, messages)
        except Exception:
            log.exception("listener of %s raised; %s", self.group, core.failure_outcome)
            result = ConsumeResult.RECONSUME_LATER
        took = time.perf_counter() - started
        self._listener_ewma_s += (took - self._listener_ewma_s) * 0.2
        if result is ConsumeResult.SUCCESS:
            core.complete(queue, state, messages)
        else:
            self._run(core.finish_failed(queue, state, messages))

    def _kick_orderly(self, queue: MessageQueue) -> None:
        """Start the queue's orderly runner unless one runs (one batch per queue at a time)."""
        with self._orderly_lock:
            if queue in self._orderly_running:
                return
            self._orderly_running.add(queue)
        if not self._run_on_pool(self._run_orderly, (queue, None), queue):  # shutting down
            with self._orderly_lock:
                self._orderly_running.discard(queue)

    def _run_orderly(self, queue: MessageQueue) -> None:
        try:
            self._orderly_batches(queue)
        except Exception:
            log.exception("orderly runner of %s on %s failed", self.group, queue)
        finally:
            with self._orderly_lock:
                self._orderly_running.discard(queue)

    def _orderly_batches(self, queue: MessageQueue) -> None:
        core = self.core
        while not self._stop.is_set():
            state, messages = core.take_orderly(queue)
            if state is None:  # gone or being handed over: nothing more to run here
                return
            if not messages:
                with self._orderly_lock:
                    self._orderly_running.discard(queue)
                    # a pull may have buffered more between the take and now: go on with it
                    if self._stop.is_set() or not core.has_buffered(queue):
                        return
                    self._orderly_running.add(queue)
                continue
            try:
                result = _outcome(self.listener(messages), self.group, messages)
            except Exception:
                log.exception("orderly listener of %s raised; retrying the batch", self.group)
                result = ConsumeResult.RECONSUME_LATER
            pause = self._run(core.finish_orderly(queue, state, messages, result))
            if pause is not None:
                self._stop.wait(pause)

    def _retry_later(self, work: Work) -> None:
        timer = threading.Timer(_LOCAL_RETRY_S, self._retry_now, (work,))
        timer.daemon = True
        with self._timers_lock:
            self._timers.add(timer)
        timer.start()

    def _retry_now(self, work: Work) -> None:
        with self._timers_lock:
            self._timers = {t for t in self._timers if t.is_alive() and t is not current_thread()}
        if not self._stop.is_set():
            self._submit(work)

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self, timeout_s: float | None = None) -> None:
        """Hand every queue over, as a rebalance does, waiting for running listener calls at
        most ``timeout_s`` (None: the ``release_timeout_s`` setting, 10 s by default):

        1. stop pulling: no listener call starts any more, batches waiting for a pool thread
           are dropped and local retries cancelled (those messages are consumed again later);
        2. wait for the listener calls already running, on the pool and the one the pull thread
           may be running itself, at most ``timeout_s`` (by default as long as a revoked
           queue's calls may take); each one's result is committed as it finishes, and the
           leases are renewed meanwhile;
        3. persist the committed offsets, then leave the group, which gives the queues' leases
           back (and wakes the parked pull); then stop the lease keeper and the pull thread.

        So no other member gets a queue while a listener call of this one still runs on it, and
        what those calls finished is not delivered again. A call still running after
        ``timeout_s`` is left to finish on its own: it commits nothing (its messages go to the
        queue's next owner, at-least-once), a WARNING names its queue and offsets, and it does
        not keep the process from exiting (the listener threads are daemons).

        A rebalance listener cannot close its consumer (the sequence that called it would wait
        for itself): :class:`~sdk.errors.IllegalStateError`."""
        if timeout_s is None:
            timeout_s = self.settings.release_timeout_s
        elif not timeout_s >= 0:
            raise InvalidArgumentError(f"timeout_s must be a number >= 0, got {timeout_s!r}")
        if self._control_thread == threading.get_ident():
            raise IllegalStateError(
                f"the push consumer of {self.group} cannot be closed from its rebalance "
                "listener (the rebalance it runs in would wait for itself): close it elsewhere"
            )
        if self._closed:
            return
        self._closed = True
        try:
            self._close(timeout_s)
        finally:
            if self._owns_transport:
                self._transport.close()
            self._close_done.set()

    def _close(self, timeout_s: float) -> None:
        """:meth:`close`'s steps, run once."""
        deadline = time.monotonic() + timeout_s
        self._stop.set()
        with self._timers_lock:
            for timer in self._timers:
                timer.cancel()
        with self._on_pool_lock:
            self._pool_open = False  # nothing is submitted after this
        if self._pool is not None:  # cancel what waits for a thread; let the running finish
            self._pool.shutdown(cancel_futures=True)
        pull_idle = self._wait_for_listeners(deadline, timeout_s)
        core = self._core
        try:
            if core is not None:  # persist, then leave the group: this also wakes the parked pull
                self._under_control(core.shutdown())
        finally:  # offsets that could not be persisted stop no thread
            for keeper in self._keepers:
                keeper.stop()
            thread = self._thread
            if thread is not None and pull_idle and thread is not current_thread():
                thread.join()

    def _wait_for_listeners(self, deadline: float, timeout_s: float) -> bool:
        """Wait until no listener call runs (none starts any more: ``_stop`` is set and the pool
        closed), at most until ``deadline``; whether the pull thread is done handing out."""
        on_pull_thread = current_thread() is self._thread  # closed by an inline listener call
        pull_idle = on_pull_thread or self._dispatching.acquire(
            timeout=max(0.0, deadline - time.monotonic())
        )
        if pull_idle and not on_pull_thread:
            self._dispatching.release()  # the pull thread sees _stop under it and returns
        with self._on_pool_lock:
            running = set(self._on_pool)
        _, late = concurrent.futures.wait(running, timeout=max(0.0, deadline - time.monotonic()))
        with self._on_pool_lock:
            left = [self._on_pool[f] for f in late if f in self._on_pool]
        inline = self._inline
        if not pull_idle and inline is not None:
            left.append(inline)
        if left or not pull_idle:
            log.warning(
                "closing the push consumer of %s: %d listener call(s) still running after "
                "%.1f s, left in flight: %s; their messages are not committed and will be "
                "delivered again",
                self.group,
                len(left) or 1,
                timeout_s,
                "; ".join(_describe(work) for work in left) or "a call on the pull thread",
            )
        return pull_idle

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def run(self) -> None:
        """Consume until SIGINT or SIGTERM, then :meth:`close` (offsets committed and
        persisted, the group left) and return: the main loop of a script or a service.

        Starts the consumer if it is not started yet. Returns early, closing too, if the
        consumer is closed meanwhile (by a listener, or another thread). Signal handlers can
        only be set in the main thread: from any other, raises
        :class:`~sdk.errors.IllegalStateError`. The handlers SIGINT and SIGTERM had before
        are restored before closing, so a second signal during the close acts as it would
        have without ``run`` (Ctrl-C twice interrupts a slow close)."""
        if threading.current_thread() is not threading.main_thread():
            raise IllegalStateError(
                f"run() of the push consumer of {self.group} must be called from the main "
                "thread (it handles SIGINT and SIGTERM); elsewhere, use start() and close()"
            )
        stop = OneStopSignal()
        previous: dict[signal.Signals, signal._HANDLER] = {}
        try:
            try:
                for sig in STOP_SIGNALS:
                    previous[sig] = signal.signal(sig, stop)
                self.start()
                log.info("push consumer of %s running until SIGINT or SIGTERM", self.group)
                self._stop.wait()  # set by close(); a signal interrupts it with StopSignal
            except StopSignal as received:
                log.info("push consumer of %s stopping on %s", self.group, received.signal_name)
        finally:
            stop.disarm()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.close()
            # closed by a listener or another thread: return once that close has committed
            self._close_done.wait()


def _describe(work: _InFlight) -> str:
    """``{queue} offset(s) ...`` of a listener call left in flight."""
    queue, messages = work
    if messages is None:
        return f"{queue} (its orderly batch)"
    offsets = sorted(m.queue_offset for m in messages)
    if len(offsets) == 1:
        return f"{queue} offset {offsets[0]}"
    return f"{queue} offsets {', '.join(map(str, offsets))}"


class AsyncPushConsumer(WarnsUnclosed):
    """The asyncio twin of :class:`PushConsumer`: ``listener`` is a coroutine function, run as
    tasks (at most ``max_concurrency`` batches at once). Start with ``await start()`` or
    ``async with``; ``await close()``.

    ``listener`` must be ``async def`` (a coroutine function, a :func:`functools.partial` of
    one, or an object with an ``async def __call__``): anything else is refused with TypeError
    (see :func:`check_listener`). What it returns is read as :class:`PushConsumer` reads its
    listener's answer: ``SUCCESS`` or ``None`` succeeds, ``RECONSUME_LATER`` or raising fails the
    batch, any other value is logged at ERROR (its repr, the group, the message ids) and the
    batch is retried.

    Everything runs on the event loop: the pull task, the listener tasks, the lease renewal and
    the offset persist are tasks, and every broker call is awaited; the consumer starts no
    thread. A listener that must block (a driver with no asyncio API) chooses its own
    executor: ``async def listener(messages): return await asyncio.to_thread(work, messages)``.
    """

    def __init__(
        self,
        broker: object,
        group: str,
        subscription: Mapping[str, str | None],
        listener: AsyncListener,
        *,
        max_concurrency: int = 64,
        clock: Clock = SYSTEM_CLOCK,
        **settings: Unpack[PushOptions],
    ) -> None:
        subscription = check_subscription(subscription)
        if type(max_concurrency) is not int or max_concurrency < 1:
            raise InvalidArgumentError(f"max_concurrency must be >= 1, got {max_concurrency!r}")
        check_listener(listener, asynchronous=True)
        self.group = check_group(group)
        self.listener = listener
        self.settings = PushSettings(**settings)
        self.client_id = new_client_id(self.settings.instance_name)
        self._clock = clock
        self._transport: AsyncBrokerTransport = resolve_async(broker)
        self._owns_transport = owns_transport(broker)
        # Serialises the core's membership sequences (see PushConsumer._control).
        self._control = asyncio.Lock()
        self._starting = asyncio.Lock()  # one start() at a time
        self._subscription = dict(subscription)
        self._max_concurrency = max_concurrency
        self._core: PushCore | None = None
        # What the consumer counts (damaged records it stepped over), kept across restarts.
        self.stats = ConsumerStats()
        self._slots: asyncio.Semaphore | None = None
        self._task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # listener batches and orderly runners
        self._retries: set[asyncio.Task[None]] = set()  # local retries waiting for their time
        self._orderly_running: set[MessageQueue] = set()
        self._keepers: list[asyncio.Task[None]] = []  # lease renewal, offset persist
        self._closed = False
        self._close_done = asyncio.Event()  # set once close() has run every step
        self._shutting_down: asyncio.Future[None] | None = None  # close()'s last steps
        self._mark_opened()

    @property
    def core(self) -> PushCore:
        if self._core is None:
            raise ClientClosedError(f"push consumer of {self.group} is not started")
        return self._core

    async def start(self) -> None:
        """Join the group, take this member's queues and start consuming."""
        if self._closed:
            raise ClientClosedError(f"push consumer of {self.group} is closed")
        async with self._starting:  # a second start() waits, then finds it started
            if self._task is not None:
                return
            broker_name = await self._transport.connect()
            self._check_not_closed_while_starting()
            core = _new_core(self, broker_name)
            try:
                await self._under_control(core.rebalance())
            except BaseException:
                await self._under_control(core.shutdown())  # leave the group
                raise
            if self._closed:  # closed while it joined: leave again
                await self._under_control(core.shutdown())
                self._check_not_closed_while_starting()
            self._begin_consuming(core)

    def _check_not_closed_while_starting(self) -> None:
        if self._closed:
            raise ClientClosedError(f"push consumer of {self.group} was closed while starting")

    def _begin_consuming(self, core: PushCore) -> None:
        """Start the keepers and the pull loop of a core that has joined the group."""
        self._core = core
        loop = asyncio.get_running_loop()
        self._keepers = [
            loop.create_task(
                self._every(
                    self.settings.lease_renew_interval_s, core.renew_leases, "lease renewal"
                ),
                name=f"quiver-leases-{self.group}",
            ),
            loop.create_task(
                self._every(OFFSET_PERSIST_INTERVAL_S, core.persist_owned, "offset persist"),
                name=f"quiver-offsets-{self.group}",
            ),
        ]
        self._slots = asyncio.Semaphore(self._max_concurrency)
        self._task = loop.create_task(self._pull_loop(), name=f"quiver-pull-{self.group}")

    async def persist_offsets(self) -> None:
        """As :meth:`PushConsumer.persist_offsets`."""
        await self._under_control(self.core.persist_owned())

    async def _run(self, steps: Steps[T]) -> T:
        """Make the broker calls ``steps`` asks for, on the loop."""
        return await run_steps_async(steps, self._transport)

    async def _under_control(self, steps: Steps[T]) -> T:
        """Run a membership sequence of the core, one at a time."""
        async with self._control:
            return await run_steps_async(steps, self._transport)

    async def _every(
        self, interval_s: float, sequence: Callable[[], Steps[Any]], what: str
    ) -> None:
        """Run ``sequence()`` every ``interval_s`` until cancelled, or until it answers False
        (the core closed); a failure is logged and tried again at the next tick."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                if await self._under_control(sequence()) is False:
                    return
            except Exception:
                log.exception("%s of the push consumer of %s failed", what, self.group)

    def assignment(self) -> list[MessageQueue]:
        """The queues this member consumes now (including the group's retry queue)."""
        return sorted(self.core.states)

    async def _pull_loop(self) -> None:
        core = self.core
        while not self._closed:
            try:
                if core.housekeeping_due():
                    await self._under_control(core.rebalance())
                elif core.ownership.settling:
                    await self._under_control(core.settle())
                if core.expiry_check_due():
                    await self._under_control(core.expire_stuck())
                batch = core.next_pull(core.hold_ms())
                result = await self._transport.pull(batch)
                works = core.on_pulled(batch, result)
                if self.settings.orderly:
                    for queue in {work[0] for work in works}:
                        self._kick_orderly(queue)
                else:
                    for work in works:  # each task waits for a slot: the loop never blocks
                        self._spawn(work)
                if result.generation != core.generation:
                    await self._under_control(core.rebalance())
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._closed:
                    return
                log.warning(
                    "pull loop of %s: %s; retrying in %.0f s", self.group, exc, _ERROR_PAUSE_S
                )
                await asyncio.sleep(_ERROR_PAUSE_S)

    def _kick_orderly(self, queue: MessageQueue) -> None:
        """Start the queue's orderly runner task unless one runs."""
        if queue in self._orderly_running:
            return
        self._orderly_running.add(queue)
        task = asyncio.get_running_loop().create_task(self._run_orderly(queue))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_orderly(self, queue: MessageQueue) -> None:
        core = self.core
        try:
            while not self._closed:
                state, messages = core.take_orderly(queue)
                if state is None or not messages:
                    return  # single-threaded loop: a later pull kicks a new runner
                try:
                    answer = await self.listener(messages)
                    result = _outcome(answer, self.group, messages)
                except Exception:
                    log.exception("orderly listener of %s raised; retrying the batch", self.group)
                    result = ConsumeResult.RECONSUME_LATER
                pause = await self._run(core.finish_orderly(queue, state, messages, result))
                if pause is not None:
                    await asyncio.sleep(pause)
        except Exception:
            log.exception("orderly runner of %s on %s failed", self.group, queue)
        finally:
            self._orderly_running.discard(queue)

    def _spawn(self, work: Work) -> None:
        task = asyncio.get_running_loop().create_task(self._consume(*work))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _consume(
        self,
        queue: MessageQueue,
        process_queue: ProcessQueue[ReceivedMessage],
        messages: list[ReceivedMessage],
    ) -> None:
        slots = self._slots
        assert slots is not None
        async with slots:
            if self._closed:  # not started before close(): consumed again later
                return
            core = self.core
            state = core.try_start(queue, process_queue, messages)
            if state is None:  # being handed over (its next owner consumes these) or taken back
                return
            try:
                answer = await self.listener(messages)
                result = _outcome(answer, self.group, messages)
            except Exception:
                log.exception("listener of %s raised; %s", self.group, core.failure_outcome)
                result = ConsumeResult.RECONSUME_LATER
            if result is ConsumeResult.SUCCESS:
                core.complete(queue, state, messages)
            else:
                await self._run(core.finish_failed(queue, state, messages))

    def _retry_later(self, work: Work) -> None:
        loop = asyncio.get_running_loop()

        async def again() -> None:
            await asyncio.sleep(_LOCAL_RETRY_S)
            if not self._closed:
                self._spawn(work)

        task = loop.create_task(again())
        self._retries.add(task)
        task.add_done_callback(self._retries.discard)

    async def close(self) -> None:
        """As :meth:`PushConsumer.close`: stop pulling (batches not started yet and local
        retries are left to be consumed again later), wait for the running listener tasks (at
        most ``release_timeout_s``: those still running then are cancelled and commit
        nothing), persist the offsets they committed, then leave the group (giving the queues'
        leases back only now) and stop the lease keeper. A close cancelled while it waits
        cancels the running listener tasks and still persists, leaves and stops the keeper; one
        cancelled while it persists or leaves raises CancelledError at once and lets that
        finish on its own. A failed persist is raised after the keeper stopped."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._stop_consuming()
        finally:  # a cancelled close still persists and leaves the group
            # A task of its own, shielded: cancelling the close while it persists does not cut
            # the shutdown short (the member would stay in the group, holding its leases, until
            # both expired). It then ends on its own; close() raises CancelledError at once.
            self._shutting_down = asyncio.ensure_future(self._shut_down(self._core))
            await asyncio.shield(self._shutting_down)

    async def _shut_down(self, core: PushCore | None) -> None:
        """Persist and leave the group, then stop the keepers; a failed persist is raised
        after that."""
        try:
            if core is not None:
                await self._under_control(core.shutdown())
        finally:  # offsets that could not be persisted stop no keeper
            for keeper in self._keepers:
                keeper.cancel()
            if self._owns_transport:
                await self._transport.close()
            self._close_done.set()

    async def _stop_consuming(self) -> None:
        """Stop pulling and local retries; wait for the running listener tasks at most
        ``release_timeout_s``, then cancel those still running (all of them if the close
        itself is cancelled meanwhile)."""
        close_cancelled = False
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                close_cancelled = current is not None and current.cancelling() > 0
        for retry in list(self._retries):
            retry.cancel()
        running = self._tasks - {asyncio.current_task()}  # a listener may close its consumer
        if close_cancelled:  # the close itself was cancelled, not only the pull task
            for task in running:
                task.cancel()
            raise asyncio.CancelledError
        if not running:
            return
        try:
            _, late = await asyncio.wait(running, timeout=self.settings.release_timeout_s)
        except asyncio.CancelledError:  # the close itself was cancelled: wait no longer
            for task in running:
                task.cancel()
            raise
        if late:
            log.warning(
                "closing the push consumer of %s: %d listener task(s) still running after "
                "release_timeout_s (%.1f s); cancelled, their messages will be delivered again",
                self.group,
                len(late),
                self.settings.release_timeout_s,
            )
            for task in late:
                task.cancel()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def run(self) -> None:
        """As :meth:`PushConsumer.run`: consume until SIGINT or SIGTERM (through the running
        loop's signal handlers), then :meth:`close` and return; returns early, closing too, if
        the consumer is closed meanwhile. Main thread only (a loop in any other thread cannot
        handle signals): elsewhere, raises :class:`~sdk.errors.IllegalStateError`. The
        handlers SIGINT and SIGTERM had before are restored before closing."""
        if threading.current_thread() is not threading.main_thread():
            raise IllegalStateError(
                f"run() of the push consumer of {self.group} must be awaited in the main "
                "thread (it handles SIGINT and SIGTERM); elsewhere, use start() and close()"
            )
        loop = asyncio.get_running_loop()
        received: asyncio.Future[signal.Signals] = loop.create_future()
        previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
        try:
            for sig in STOP_SIGNALS:
                loop.add_signal_handler(sig, settle_once, received, sig)
            await self.start()
            log.info("push consumer of %s running until SIGINT or SIGTERM", self.group)
            if self._task is not None:  # the pull task ends when the consumer is closed
                ending: set[asyncio.Future[Any]] = {received, self._task}
                await asyncio.wait(ending, return_when=asyncio.FIRST_COMPLETED)
            if received.done():
                log.info("push consumer of %s stopping on %s", self.group, received.result().name)
        finally:
            for sig, handler in previous.items():
                loop.remove_signal_handler(sig)
                if handler is not None:
                    signal.signal(sig, handler)
            await self.close()
            # closed by a listener or another task: return once that close has committed
            await self._close_done.wait()


def _new_core(consumer: PushConsumer | AsyncPushConsumer, broker_name: str) -> PushCore:
    """The decisions of ``consumer``'s membership (its group, id, subscription, settings,
    stats and clock) against broker ``broker_name``, its local retries handed back to it."""
    core = PushCore(
        broker_name,
        consumer.group,
        consumer.client_id,
        consumer._subscription,
        consumer.settings,
        consumer.stats,
        consumer._clock,
    )
    core.retry_later = consumer._retry_later
    return core
