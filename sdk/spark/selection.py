"""Which topics and which messages a ``quiver`` read selects beyond offsets: ``topicPattern``
and ``tags``. Plain data, no pyspark (the rows are tested in :mod:`sdk.spark.row_filters`).

* ``topicPattern``: a regular expression (Python's ``re``) a topic name must match whole, as
  Kafka's ``subscribePattern``; the topics are those of the store when the read is planned,
  sorted. It excludes ``topics``. As Kafka's pattern leaves out internal topics, it never
  matches the store's own topics (:func:`~localstore.record.validation.is_system_topic`: the
  scheduled copies of delayed messages, transactions' half messages), which ``topics`` may
  name.
* ``tags``: a tag expression as subscriptions take it (``"*"``, or tags joined by ``||``,
  parsed by :meth:`localstore.record.tags.TagFilter.parse`); a row is kept when its ``TAGS``
  equals one of the tags (a message without a tag never matches a named tag). The test runs on
  the decoded ``tags`` column, so a tag hash collision never lets another tag through.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from localstore.record.tags import TagFilter
from localstore.record.validation import is_system_topic
from quiver_errors import InvalidArgumentError


@dataclass(frozen=True)
class TopicSelection:
    """The topics a read names: a list (``topics``) or a pattern (``topicPattern``)."""

    names: tuple[str, ...]
    pattern: str | None = None

    def covers(self, topic: str) -> bool:
        """Whether ``topic`` is read (a name given, or one the pattern matches and not a
        system topic)."""
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None and not is_system_topic(topic)
        return topic in self.names

    def resolve(self, store_topics: Iterable[str]) -> tuple[str, ...]:
        """The topics read: the names given, or the store's topics the pattern matches."""
        if self.pattern is None:
            return self.names
        return tuple(sorted(topic for topic in set(store_topics) if self.covers(topic)))


def parse_topic_selection(options: Mapping[str, str], *, required: bool) -> TopicSelection:
    """``topics`` or ``topicPattern`` of ``options`` (keys lower-cased), one of them when
    ``required``; :class:`InvalidArgumentError` naming the option otherwise."""
    names_text = options.get("topics")
    pattern_text = options.get("topicpattern")
    if names_text is not None and pattern_text is not None:
        raise InvalidArgumentError("topics: conflicts with topicPattern; give one of them")
    if pattern_text is not None:
        return TopicSelection((), _pattern(pattern_text))
    if names_text is None or not names_text.strip():
        if required:
            raise InvalidArgumentError("topics: the option is required (or topicPattern)")
        return TopicSelection((), None)
    names = [name.strip() for name in names_text.split(",")]
    if not all(names):
        raise InvalidArgumentError(f"topics: an empty topic name in {names_text!r}")
    return TopicSelection(tuple(dict.fromkeys(names)))


def _pattern(text: str) -> str:
    if not text.strip():
        raise InvalidArgumentError("topicPattern: the pattern is empty")
    try:
        re.compile(text)
    except re.error as exc:
        raise InvalidArgumentError(
            f"topicPattern: not a regular expression ({exc}): {text!r}"
        ) from None
    return text


def parse_tags(text: str | None) -> tuple[str, ...] | None:
    """The tags a ``tags`` expression keeps, sorted; None for every message (``*`` or not
    given). :class:`InvalidArgumentError` naming ``tags`` for an expression naming no tag."""
    if text is None:
        return None
    try:
        parsed = TagFilter.parse(text)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"tags: {exc}") from None
    return None if parsed.tags is None else tuple(sorted(parsed.tags))
