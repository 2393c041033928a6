"""QueueLeases: one live owner per group queue; renew, release, expiry, members leaving."""

from __future__ import annotations

from offsetstore import MessageQueue
from sdk.broker.leases import QueueLeases

Q0 = MessageQueue("t", "broker-a", 0)
Q1 = MessageQueue("t", "broker-a", 1)


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def test_a_held_queue_is_refused_to_others_until_released():
    leases = QueueLeases(lease_ms=1000, clock_ms=Clock())
    assert leases.acquire("g", "a", [Q0, Q1]) == {Q0, Q1}
    assert leases.acquire("g", "b", [Q0, Q1]) == set()
    assert leases.acquire("other-group", "b", [Q0]) == {Q0}  # groups are separate
    assert leases.release("g", "b", [Q0]) == 0  # not b's to give
    assert leases.release("g", "a", [Q0]) == 1
    assert leases.acquire("g", "b", [Q0, Q1]) == {Q0}
    assert leases.owners("g") == {Q0: "b", Q1: "a"}


def test_renewal_keeps_and_expiry_frees_a_lease():
    clock = Clock()
    leases = QueueLeases(lease_ms=1000, clock_ms=clock)
    leases.acquire("g", "a", [Q0])
    clock.now = 900
    assert leases.acquire("g", "a", [Q0]) == {Q0}  # renewed until 1900
    clock.now = 1500
    assert leases.acquire("g", "b", [Q0]) == set()
    clock.now = 1900
    assert leases.owners("g") == {}
    assert leases.acquire("g", "b", [Q0]) == {Q0}


def test_a_member_leaving_loses_every_lease():
    leases = QueueLeases(clock_ms=Clock())
    leases.acquire("g", "a", [Q0, Q1])
    leases.acquire("h", "a", [Q0])
    assert leases.release_member("g", "a") == 2
    assert leases.owners("g") == {} and leases.owners("h") == {Q0: "a"}
