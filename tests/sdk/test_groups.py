"""GroupRegistry: members sorted, generation bumped on every membership change, expiry."""

from __future__ import annotations

from sdk.broker.groups import GroupRegistry


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def test_join_refresh_and_leave_bump_the_generation_only_on_change():
    registry = GroupRegistry(expiry_ms=1000, clock_ms=Clock())
    first = registry.heartbeat("g", "b", {"t": "*"}, "CLUSTERING")
    second = registry.heartbeat("g", "a", {"t": "*"}, "CLUSTERING")
    assert second == first + 1
    assert registry.heartbeat("g", "a", {"t": "*"}, "CLUSTERING") == second  # a refresh
    view = registry.view("g")
    assert view.members == ("a", "b")
    assert view.subscriptions["a"] == {"t": "*"}
    assert registry.unregister("g", "a") == second + 1
    assert registry.unregister("g", "a") == second + 1  # unknown member: no change
    assert registry.view("g").members == ("b",)


def test_silent_members_expire():
    clock = Clock()
    registry = GroupRegistry(expiry_ms=1000, clock_ms=clock)
    registry.heartbeat("g", "a", {}, "CLUSTERING")
    clock.now = 600
    registry.heartbeat("g", "b", {}, "CLUSTERING")
    before = registry.generation("g")
    clock.now = 1500  # a is silent for 1500 ms, b for 900 ms
    registry.expire()
    assert registry.view("g").members == ("b",)
    assert registry.generation("g") == before + 1


def test_unknown_group_is_empty():
    registry = GroupRegistry()
    assert registry.view("nobody").members == ()
    assert registry.generation("nobody") == 0
    assert registry.unregister("nobody", "x") == 0
