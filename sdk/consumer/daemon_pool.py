"""A thread pool whose threads never hold the interpreter up: a push consumer's listener pool.

:class:`concurrent.futures.ThreadPoolExecutor` joins its worker threads when the interpreter
exits, so one listener call that never returns keeps the process alive after its consumer was
closed. :class:`DaemonThreadPool` runs the same work on daemon threads: a call still running
when the interpreter exits is abandoned, which a push consumer may do because what it did not
finish was not committed (it is delivered again, at-least-once).

Invariants: a submitted task runs at most once, on one of at most ``max_workers`` threads,
started as needed; after :meth:`DaemonThreadPool.shutdown` nothing more is accepted, tasks not
yet started are cancelled (with ``cancel_futures``) and the idle threads exit.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from sdk.errors import IllegalStateError, InvalidArgumentError

__all__ = ["DaemonThreadPool"]

_Task = tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]


class DaemonThreadPool:
    """``submit`` and ``shutdown(wait=False, cancel_futures=...)`` of a thread pool executor,
    on daemon threads named ``{thread_name_prefix}_{n}``."""

    def __init__(self, max_workers: int, thread_name_prefix: str) -> None:
        if max_workers < 1:
            raise InvalidArgumentError(f"max_workers must be >= 1, got {max_workers}")
        self._max_workers = max_workers
        self._prefix = thread_name_prefix
        self._tasks: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # one permit per worker waiting for a task
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._shut_down = False

    def submit(self, task: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run ``task(*args)`` on a pool thread; RuntimeError after :meth:`shutdown`."""
        with self._lock:
            if self._shut_down:
                raise IllegalStateError("cannot submit to a pool that was shut down")
            future: Future[Any] = Future()
            self._tasks.put((future, task, args))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._max_workers:
                thread = threading.Thread(
                    target=self._work, name=f"{self._prefix}_{len(self._threads)}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
            return future

    def _work(self) -> None:
        while True:
            item = self._tasks.get()
            if item is None:  # shut down: the next worker sees it too
                self._tasks.put(None)
                return
            future, task, args = item
            del item
            if future.set_running_or_notify_cancel():
                try:
                    result = task(*args)
                except BaseException as exc:
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del future, task, args  # nothing of the task outlives it here
            self._idle.release()

    def shutdown(self, *, cancel_futures: bool = False) -> None:
        """Accept nothing more; cancel the tasks not started (``cancel_futures``); let the
        running ones finish on their own (never waits: the threads are daemons)."""
        with self._lock:
            self._shut_down = True
            if cancel_futures:
                while True:
                    try:
                        item = self._tasks.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None:
                        item[0].cancel()
            self._tasks.put(None)
