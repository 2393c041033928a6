"""ArrivalNotifier: parked waiters wake on an arrival on one of their queues, never lose one."""

from __future__ import annotations

import threading
import time

from sdk.broker.long_poll import ArrivalNotifier


def test_watch_fires_once_on_its_queue_only():
    notifier = ArrivalNotifier()
    fired: list[str] = []
    notifier.watch([("t", 0), ("t", 1)], lambda: fired.append("a"))
    notifier.notify("t", 2)
    notifier.notify("other", 0)
    assert fired == []
    notifier.notify("t", 1)
    notifier.notify("t", 0)  # the same watch on another key: fires once only
    assert fired == ["a"]


def test_a_thread_learns_whether_its_notifications_woke_anyone():
    notifier = ArrivalNotifier()
    notifier.notify("t", 0)  # nobody waits
    assert notifier.woken_here() == 0
    notifier.watch([("t", 0)], lambda: None)
    elsewhere: list[int] = []
    thread = threading.Thread(target=lambda: elsewhere.append(notifier.woken_here()))
    notifier.notify("t", 0)
    thread.start()
    thread.join(30)
    assert notifier.woken_here() == 1
    assert elsewhere == [0]  # counted for the thread that notified only


def test_cancelled_watch_never_fires():
    notifier = ArrivalNotifier()
    fired: list[int] = []
    watch = notifier.watch([("t", 0)], lambda: fired.append(1))
    notifier.cancel(watch)
    notifier.notify("t", 0)
    assert fired == []
    assert not notifier._watches  # nothing left behind


def test_wait_returns_at_once_when_ready():
    notifier = ArrivalNotifier()
    started = time.monotonic()
    assert notifier.wait_keys([("t", 0)], 5.0, lambda: True) is not None
    assert time.monotonic() - started < 1.0


def test_an_arrival_while_readiness_is_checked_is_not_lost():
    """The watch is registered before ``ready`` is asked, so a message that arrives between
    the caller's last look and the wait still wakes it."""
    notifier = ArrivalNotifier()

    def arrives_while_checking() -> bool:
        notifier.notify("t", 0)
        return False

    started = time.monotonic()
    assert notifier.wait_keys([("t", 0)], 5.0, arrives_while_checking) is not None
    assert time.monotonic() - started < 1.0


def test_wait_times_out_without_arrival():
    notifier = ArrivalNotifier()
    started = time.monotonic()
    assert notifier.wait_keys([("t", 0)], 0.05, lambda: False) is None
    assert time.monotonic() - started >= 0.05


def test_wait_is_woken_by_an_arrival_from_another_thread():
    notifier = ArrivalNotifier()
    timer = threading.Timer(0.05, notifier.notify, ("t", 3))
    timer.start()
    started = time.monotonic()
    assert notifier.wait_keys([("t", 3)], 10.0, lambda: False) is not None
    assert time.monotonic() - started < 5.0
    timer.join()


def test_notify_all_wakes_every_waiter():
    notifier = ArrivalNotifier()
    fired: list[int] = []
    notifier.watch([("a", 0)], lambda: fired.append(1))
    notifier.watch([("b", 1)], lambda: fired.append(2))
    notifier.notify_all()
    assert sorted(fired) == [1, 2]
