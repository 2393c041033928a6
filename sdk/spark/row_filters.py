"""Row filters the ``quiver`` source applies to its record batches itself, vectorised over a
batch's columns (pyarrow compute), never row by row in Python.

* :func:`keep_tags`: the ``tags`` option's test (:mod:`sdk.spark.selection`): a row stays when
  its ``tags`` value is one of the tags (a null never matches).
* :func:`keep_topics`: a commitlog scan's ``topics`` / ``topicPattern`` test: a row stays when
  its topic is read. The pattern (Python's ``re``) is tried once per distinct topic of a batch.

Batches a filter leaves empty are not yielded.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from sdk.spark.selection import TopicSelection


def keep_tags(
    batches: Iterable[pa.RecordBatch], tags: tuple[str, ...] | None
) -> Iterator[pa.RecordBatch]:
    """The rows of ``batches`` whose ``tags`` is one of ``tags`` (every row for None)."""
    if tags is None:
        yield from batches
        return
    value_set = pa.array(tags, pa.string())
    for batch in batches:
        yield from _non_empty(batch.filter(pc.is_in(batch.column("tags"), value_set=value_set)))


def keep_topics(
    batches: Iterable[pa.RecordBatch], selection: TopicSelection | None
) -> Iterator[pa.RecordBatch]:
    """The rows of ``batches`` whose ``topic`` ``selection`` covers (every row for None)."""
    if selection is None:
        yield from batches
        return
    for batch in batches:
        topics = batch.column("topic")
        read = [topic for topic in pc.unique(topics).to_pylist() if selection.covers(topic)]
        yield from _non_empty(batch.filter(pc.is_in(topics, value_set=pa.array(read, pa.string()))))


def _non_empty(batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    if batch.num_rows:
        yield batch
