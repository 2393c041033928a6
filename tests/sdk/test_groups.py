"""GroupRegistry: members sorted, generation bumped on every membership change, expiry."""

from __future__ import annotations

from sdk.broker.groups import GroupRegistry
from sdk.clock import ManualClock


def test_join_refresh_and_leave_bump_the_generation_only_on_change():
    registry = GroupRegistry(expiry_ms=1000, clock=ManualClock())
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
    clock = ManualClock()
    registry = GroupRegistry(expiry_ms=1000, clock=clock)
    registry.heartbeat("g", "a", {}, "CLUSTERING")
    clock.advance(0.6)
    registry.heartbeat("g", "b", {}, "CLUSTERING")
    before = registry.generation("g")
    clock.advance(0.9)  # a is silent for 1500 ms, b for 900 ms
    registry.expire()
    assert registry.view("g").members == ("b",)
    assert registry.generation("g") == before + 1


def test_unknown_group_is_empty():
    registry = GroupRegistry()
    assert registry.view("nobody").members == ()
    assert registry.generation("nobody") == 0
    assert registry.unregister("nobody", "x") == 0
