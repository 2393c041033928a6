"""Tag codes and tag expressions.

A consume-queue unit carries a ``tagsCode`` so that filtering by tag needs no commitlog read:
Java's ``String.hashCode`` of the ``TAGS`` property (0 when a message has no tag). Under
``SCHEDULE_TOPIC_XXXX`` the code is the delivery time instead: store time + the delay of the
message's ``DELAY`` level (levels above the table's last are clamped to it; a level missing from
the table adds 1000 ms, as RocketMQ does).

A tag expression is ``"*"`` (or empty: everything) or tags joined by ``||``. Matching is two-step,
as in RocketMQ: the store compares hash codes, then the tag string itself is re-checked so that a
hash collision never delivers a message of another tag.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from localstore.record.javahash import java_hash
from quiver_errors import InvalidArgumentError

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_UNKNOWN_LEVEL_DELAY_MS = 1000

_TAG_CODES: dict[str | None, int] = {None: 0, "": 0}  # read directly by the put path
_TAG_CACHE_LIMIT = 65536


def tag_code(tags: str | None) -> int:
    """The consume-queue tag code of a ``TAGS`` value (cached: tags repeat)."""
    if not tags:
        return 0
    code = _TAG_CODES.get(tags)
    if code is None:
        code = java_hash(tags)
        if len(_TAG_CODES) < _TAG_CACHE_LIMIT:
            _TAG_CODES[tags] = code
    return code


def parse_delay_levels(spec: str) -> tuple[int, ...]:
    """``"1s 5s 1m"`` -> ``(1000, 5000, 60000)``; level n is entry n-1."""
    delays = []
    for token in spec.split(" "):
        if not token:
            continue
        unit = _UNIT_MS.get(token[-1])
        if unit is None or not token[:-1].isdigit():
            raise InvalidArgumentError(
                f"bad delay level {token!r} in {spec!r}: want a number and s, m, h or d"
            )
        delays.append(int(token[:-1]) * unit)
    if not delays:
        raise InvalidArgumentError("the delay level table is empty")
    return tuple(delays)


def schedule_tag_code(
    store_timestamp: int, delay_level: str | None, delays: tuple[int, ...]
) -> int:
    """Delivery time of a message under ``SCHEDULE_TOPIC_XXXX`` (its consume-queue tag code)."""
    if delay_level is None:
        return store_timestamp
    level = int(delay_level)
    level = min(level, len(delays))
    delay = delays[level - 1] if level >= 1 else _UNKNOWN_LEVEL_DELAY_MS
    return store_timestamp + delay


def unit_tag_code(
    topic: str, properties: Mapping[str, str], store_timestamp: int, delays: tuple[int, ...]
) -> int:
    """The tag code a record's consume-queue unit carries (the put path computes the same
    inline, per batch)."""
    if topic == SCHEDULE_TOPIC:
        return schedule_tag_code(store_timestamp, properties.get("DELAY"), delays)
    return tag_code(properties.get("TAGS"))


@dataclass(frozen=True, slots=True)
class TagFilter:
    """A parsed tag expression: ``None`` tags means "everything"."""

    expression: str
    tags: frozenset[str] | None
    codes: frozenset[int]

    @classmethod
    def parse(cls, expression: str | None) -> TagFilter:
        """Parse a tag expression (cached: consumers repeat theirs on every pull)."""
        known = _PARSED.get(expression)
        if known is not None:
            return known
        text = (expression or "").strip()
        if text in ("", "*"):
            parsed = cls("*", None, frozenset())
        else:
            tags = frozenset(t.strip() for t in text.split("||") if t.strip())
            if not tags:
                raise InvalidArgumentError(f"tag expression {expression!r} names no tag")
            parsed = cls(text, tags, frozenset(tag_code(t) for t in tags))
        if len(_PARSED) < _TAG_CACHE_LIMIT:
            _PARSED[expression] = parsed
        return parsed

    @property
    def matches_all(self) -> bool:
        return self.tags is None

    def tag_matches(self, tags: str | None) -> bool:
        """Second step, on the stored ``TAGS`` value: removes hash collisions."""
        return self.tags is None or (tags is not None and tags in self.tags)


_PARSED: dict[str | None, TagFilter] = {}
