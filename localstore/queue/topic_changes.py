"""An administrator's changes to a store's topics: set a topic's queue counts and permission,
delete a topic. Called by :class:`localstore.MessageStore` under its put lock.

Invariants:

* A put never lands in a queue the topic's config no longer allows: every cached put state of
  the topic is dropped (and marked ``retired``, which the single-put fast path checks under the
  put lock), so the next put of the topic passes the config check again.
* Deleting a topic removes its config, its consume queues and its time indexes, as RocketMQ's
  ``deleteTopic`` does; its records stay in the commitlog (and the key index) until retention
  removes them. The consume-queue files are retired (:class:`RetiredFiles`): unlinked now,
  unmapped once no reader can still be in them. The topic's tombstone
  (:meth:`TopicTable.remove`) keeps recovery from dispatching its records again. A deletion is
  logged at WARNING with how many messages it made unreadable.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from pathlib import Path

from localstore.files.retired import RetiredFiles
from localstore.put.path import PutPath
from localstore.queue.registry import QueueRegistry
from localstore.queue.time_index import QueueTimeIndex, time_index_directory
from localstore.queue.topics import TopicConfig, TopicTable

__all__ = ["delete_topic", "set_topic"]

log = logging.getLogger(__name__)


def set_topic(
    topics: TopicTable,
    puts: PutPath,
    name: str,
    *,
    read_queue_nums: int,
    write_queue_nums: int,
    perm: int,
) -> TopicConfig:
    """Create topic ``name`` or change its queue counts and permission, and save the table."""
    config = topics.get(name)
    if config is None:
        config = topics.topics[name] = TopicConfig(name, read_queue_nums, write_queue_nums, perm)
    else:
        config.read_queue_nums = read_queue_nums
        config.write_queue_nums = write_queue_nums
        config.perm = perm
    puts.forget_topic(name)
    topics.save()
    return config


def delete_topic(
    root: Path,
    topics: TopicTable,
    puts: PutPath,
    queues: QueueRegistry,
    time_indexes: dict[tuple[str, int], QueueTimeIndex],
    retired: RetiredFiles,
    name: str,
    commitlog_end: int,
) -> list[int]:
    """Delete topic ``name`` (see the module docstring); answers the queue ids it had."""
    puts.forget_topic(name)
    queue_ids = sorted(q for (t, q) in queues.queues if t == name)
    unreadable = {
        q: max(queues.queues[(name, q)].max_offset - queues.queues[(name, q)].min_offset, 0)
        for q in queue_ids
    }
    for queue_id in queue_ids:
        queue = queues.queues.pop((name, queue_id))
        segments, queue.segments.segments = queue.segments.segments, []
        for segment in segments:
            with contextlib.suppress(OSError):  # cannot be mapped: a reader gets a typed error
                segment.keep_mapped()
            retired.retire(segment.path, segment.destroy)
        time_index = time_indexes.pop((name, queue_id), None)
        if time_index is not None:
            time_index.close()
        shutil.rmtree(time_index_directory(root, name, queue_id), ignore_errors=True)
    shutil.rmtree(queues.directory / name, ignore_errors=True)
    shutil.rmtree(time_index_directory(root, name, 0).parent, ignore_errors=True)
    topics.remove(name, commitlog_end)
    log.warning(
        "deleted topic %s: %d message(s) in queue(s) %s are no longer readable (their records "
        "stay in the commitlog, before offset %d, until retention removes them)",
        name,
        sum(unreadable.values()),
        queue_ids,
        commitlog_end,
    )
    return queue_ids
