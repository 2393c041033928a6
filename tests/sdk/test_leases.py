"""QueueLeases: one live owner per group queue; renew, release, expiry, members leaving."""

from __future__ import annotations

from offsetstore import MessageQueue
from sdk.broker.leases import QueueLeases
from sdk.clock import ManualClock

Q0 = MessageQueue("t", "broker-a", 0)
Q1 = MessageQueue("t", "broker-a", 1)


def test_a_held_queue_is_refused_to_others_until_released():
    leases = QueueLeases(lease_ms=1000, clock=ManualClock())
    assert leases.acquire("g", "a", [Q0, Q1]) == {Q0, Q1}
    assert leases.acquire("g", "b", [Q0, Q1]) == set()
    assert leases.acquire("other-group", "b", [Q0]) == {Q0}  # groups are separate
    assert leases.release("g", "b", [Q0]) == 0  # not b's to give
    assert leases.release("g", "a", [Q0]) == 1
    assert leases.acquire("g", "b", [Q0, Q1]) == {Q0}
    assert leases.owners("g") == {Q0: "b", Q1: "a"}


def test_renewal_keeps_and_expiry_frees_a_lease():
    clock = ManualClock()
    leases = QueueLeases(lease_ms=1000, clock=clock)
    leases.acquire("g", "a", [Q0])
    clock.advance(0.9)
    assert leases.acquire("g", "a", [Q0]) == {Q0}  # renewed until 1900
    clock.advance(0.6)
    assert leases.acquire("g", "b", [Q0]) == set()
    clock.advance(0.4)
    assert leases.owners("g") == {}
    assert leases.acquire("g", "b", [Q0]) == {Q0}


def test_a_member_leaving_loses_every_lease():
    leases = QueueLeases(clock=ManualClock())
    leases.acquire("g", "a", [Q0, Q1])
    leases.acquire("h", "a", [Q0])
    assert leases.release_member("g", "a") == 2
    assert leases.owners("g") == {} and leases.owners("h") == {Q0: "a"}
