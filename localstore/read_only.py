"""``ReadOnlyStore``: a store another process holds open (a running application), inspected.

What it keeps:

* **Nothing is written.** No lock is taken (the holder's flock stays its own), nothing is
  recovered, no file is created, resized, truncated or deleted: no abort marker, no checkpoint,
  no derived index. Segment files are opened ``O_RDONLY`` and mapped ``ACCESS_READ``
  (:meth:`MappedFile.existing` with ``read_only``); config files are plain reads.
* **Only what is fully written is served.** The commitlog's *visible end* is found at open by
  walking records (the frame rules and the body CRC, :func:`~localstore.record.walk.walk_segment`,
  recovery's inner loop) from the newest record the consume queues point at that is whole; the
  walk stops at the first position that holds no valid record. A queue serves only its units
  whose record lies entirely below that end (under sync flush a unit may be written before its
  record reaches the file; under async flush the writer may be mid-record), and the reader's own
  checks (:mod:`localstore.reader`: each record decodes and names the unit's topic, queue and
  queue offset) hold for every get. A torn tail, a unit ahead of the log, a file being created
  (not yet its full length) or a consume-queue file prepared ahead of its units are all treated
  as not written yet: never served, never an error. Damage after the newest dispatched record
  ends the visible log there too (it is the holder's recovery's to judge).
* **A snapshot at open.** Later writes are not seen until :meth:`ReadOnlyStore.refresh`, which
  takes a new snapshot (not while another thread reads). A file the holder deletes while a
  snapshot is taken makes it list the files again. A file that retention deletes after
  the snapshot reads as removed (``MESSAGE_WAS_REMOVING``) or raises
  :class:`~localstore.errors.SegmentUnavailableError` when it had never been mapped.

Key queries use the index files as the holder last synced their headers, so keys indexed
since its last flush of them may be missing; every hit is re-checked against its message, so
a key query never returns another key's message or one past the visible end.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from types import TracebackType

from localstore.commitlog.log import CommitLog
from localstore.commitlog.offset_index import stored_split_points
from localstore.errors import StoreDirectoryError, StoreError
from localstore.files.json_shape import backup_path
from localstore.files.mapped_file import NAME_DIGITS, MappedFile
from localstore.files.segments import SegmentQueue
from localstore.files.store_directory import holds_a_store
from localstore.geometry import GEOMETRY_FILE, StoreGeometry, infer_geometry, load_geometry
from localstore.index.index_file import IndexFile
from localstore.index.service import IndexService
from localstore.queue.consume_queue import (
    UNIT_SIZE,
    ConsumeQueue,
    filler_prefix_units,
    units_ending_within,
    valid_prefix_units,
)
from localstore.queue.registry import QueueRegistry
from localstore.queue.time_index import offset_for_timestamp
from localstore.queue.topics import TopicTable
from localstore.reader import (
    caught_up,
    get_messages,
    message_at,
    message_by_offset_msg_id,
    message_or_none,
    query_uniq_key,
    read_filter,
)
from localstore.record.codec import StoredMessage, read_store_timestamp
from localstore.record.frame import frame_problem
from localstore.record.layout import INT
from localstore.record.tags import TagFilter
from localstore.record.walk import WALK_INVALID, walk_segment
from localstore.results import GetResult
from localstore.retention import correct_min_offset
from localstore.store import DEFAULT_MAX_BYTES

_LAST_TIME_MS = 2**63 - 1
_SNAPSHOT_ATTEMPTS = 3  # a file deleted while the snapshot loads: list the files again


class ReadOnlyStore:
    """A read-only snapshot of the store at ``root`` (see the module docstring): the reading
    half of :class:`~localstore.store.MessageStore`'s API, whoever holds the store.

    Raises :class:`StoreDirectoryError` when ``root`` is missing, a file, or holds no store.
    """

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)
        if not self.root.is_dir():
            what = "is a file, not a directory" if self.root.exists() else "does not exist"
            raise StoreDirectoryError(self.root, what)
        if not holds_a_store(self.root):
            raise StoreDirectoryError(self.root, "holds no store (nothing to open read-only)")
        self.geometry: StoreGeometry = _read_geometry(self.root)
        self._closed = False
        self._open_snapshot()

    # -- the snapshot ----------------------------------------------------------------------
    def _open_snapshot(self) -> None:
        """Load the files as they lie and fix the snapshot's ends; on failure nothing stays
        mapped. A file the holder deleted while it loaded (a topic deleted, retention) makes
        it start again: the next listing no longer names it."""
        for attempt in range(1, _SNAPSHOT_ATTEMPTS + 1):
            try:
                self._try_snapshot()
                return
            except OSError as exc:
                if exc.errno != errno.ENOENT or attempt == _SNAPSHOT_ATTEMPTS:
                    raise

    def _try_snapshot(self) -> None:
        geometry = self.geometry
        self.topics = TopicTable(self.root)
        self.commitlog = CommitLog(
            self.root / "commitlog", geometry.commitlog_file_size, sync_flush=False
        )
        self.queues = QueueRegistry(self.root / "consumequeue", geometry.cq_entries_per_file)
        self.index: IndexService | None = None
        try:
            self._load_snapshot()
        except BaseException:
            self._close_files()
            raise

    def _load_snapshot(self) -> None:
        self.topics.load(self.root / "consumequeue")
        _load_segments(self.commitlog.segments, read_ahead=True)
        for topic, queue_id in _queue_names(self.queues.directory):
            queue = self.queues.get_or_create(topic, queue_id)
            _load_queue(queue, self.commitlog.min_offset)
        end = _visible_end(self.commitlog, _walk_start(self.commitlog, self.queues))
        _cut_log(self.commitlog, end)
        for queue in self.queues.queues.values():
            _cut_queue(queue, end)
        self.index = _open_key_index(self.root, self.geometry)

    def refresh(self) -> None:
        """Take a new snapshot: what the holder has written since is seen from now on. Not
        while another thread reads through this store."""
        self._ensure_open()
        self._close_files()
        self._open_snapshot()

    @property
    def visible_end(self) -> int:
        """The commitlog offset just past the last record this snapshot serves."""
        return self.commitlog.max_offset

    def close(self) -> None:
        """Unmap every file. Idempotent; writes nothing."""
        if not self._closed:
            self._closed = True
            self._close_files()

    def _close_files(self) -> None:
        for queue in self.queues.queues.values():
            queue.segments.close()
        self.commitlog.segments.close()
        if self.index is not None:
            for index_file in self.index.files:
                index_file.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> ReadOnlyStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _ensure_open(self) -> None:
        if self._closed:
            raise StoreError(f"read-only view of {self.root} is closed")

    # -- reading (as MessageStore) ---------------------------------------------------------
    def get_messages(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        *,
        max_count: int = 32,
        max_bytes: int = DEFAULT_MAX_BYTES,
        tags: str | TagFilter | None = None,
    ) -> GetResult:
        """As :meth:`MessageStore.get_messages`, within the snapshot."""
        return self._get(topic, queue_id, queue_offset, max_count, max_bytes, tags, raw=False)

    def get_message_bytes(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        *,
        max_count: int = 32,
        max_bytes: int = DEFAULT_MAX_BYTES,
        tags: str | TagFilter | None = None,
    ) -> GetResult:
        """As :meth:`MessageStore.get_message_bytes`, within the snapshot: ``result.raw``
        holds the stored records' bytes, copied, not decoded (without a tag filter)."""
        return self._get(topic, queue_id, queue_offset, max_count, max_bytes, tags, raw=True)

    def _get(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int,
        max_bytes: int,
        tags: str | TagFilter | None,
        *,
        raw: bool,
    ) -> GetResult:
        self._ensure_open()
        return get_messages(
            self.commitlog,
            self.queues.get(topic, queue_id),
            queue_offset,
            max_count,
            max_bytes,
            read_filter(max_count, tags),
            raw,
        )

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(q for (t, q) in self.queues.queues if t == topic)

    def topic_names(self) -> list[str]:
        """The topics that have a queue in this snapshot, sorted."""
        return sorted({topic for topic, _ in self.queues.queues})

    def min_offset(self, topic: str, queue_id: int) -> int:
        """Smallest readable queue offset (0 for an unknown queue)."""
        self._ensure_open()
        queue = self.queues.get(topic, queue_id)
        return queue.min_offset if queue is not None else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        """One past the last queue offset this snapshot serves (0 for an unknown queue)."""
        self._ensure_open()
        queue = self.queues.get(topic, queue_id)
        return max(queue.max_offset, queue.min_offset) if queue is not None else 0

    def caught_up(self, topic: str, queue_id: int, queue_offset: int) -> bool:
        """As :meth:`MessageStore.caught_up`, within the snapshot."""
        self._ensure_open()
        return caught_up(self.queues.get(topic, queue_id), self.commitlog, queue_offset)

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """As :meth:`MessageStore.offset_for_timestamp` (a binary search over the queue's
        units: the holder's sparse time index is not read)."""
        self._ensure_open()
        return offset_for_timestamp(
            self.queues.get(topic, queue_id), self.commitlog, None, timestamp_ms
        )

    def split_points(self, parts: int) -> list[int]:
        """As :meth:`MessageStore.split_points`, within the snapshot: commitlog offsets that
        cut the visible log into at most ``parts`` ranges at record starts, found through the
        holder's offset index files as they lie (read, never repaired)."""
        self._ensure_open()
        return stored_split_points(self.root, self.commitlog, parts)

    def store_timestamp(self, topic: str, queue_id: int, queue_offset: int) -> int:
        """Store time (ms) of the message at ``queue_offset``; -1 when there is none."""
        self._ensure_open()
        queue = self.queues.get(topic, queue_id)
        if queue is None or not queue.min_offset <= queue_offset < queue.max_offset:
            return -1
        located = self.commitlog.segment_view(queue.unit_head(queue_offset)[0])
        return -1 if located is None else read_store_timestamp(*located)

    def message_at(self, phys_offset: int) -> StoredMessage:
        """The message whose record starts at ``phys_offset``; :class:`RecordError` when no
        record of the snapshot starts there."""
        self._ensure_open()
        return message_at(self.commitlog, phys_offset)

    def query_by_key(
        self,
        topic: str,
        key: str,
        *,
        max_count: int = 64,
        begin_ms: int = 0,
        end_ms: int = _LAST_TIME_MS,
    ) -> list[StoredMessage]:
        """As :meth:`MessageStore.query_by_key` (see the module docstring on the newest
        keys). Raises :class:`StoreError` when the store keeps no index."""
        self._ensure_open()
        index = self._key_index()
        return index.query(topic, key, max_count, begin_ms, end_ms, self._message_or_none)

    def query_by_id(self, message_id: str) -> list[StoredMessage]:
        """As :meth:`MessageStore.query_by_id`: an offsetMsgId, else a UNIQ_KEY (any topic)."""
        self._ensure_open()
        message = message_by_offset_msg_id(self.commitlog, message_id)
        if message is not None:
            return [message]
        topics = set(self.topics.topics) | {t for t, _ in self.queues.queues}
        return query_uniq_key(self._key_index(), topics, self.commitlog, message_id)

    def _key_index(self) -> IndexService:
        if self.index is None:
            raise StoreError(f"store {self.root} keeps no key index (created with --no-index)")
        return self.index

    def _message_or_none(self, phys_offset: int) -> StoredMessage | None:
        return message_or_none(self.commitlog, phys_offset)


def _read_geometry(root: Path) -> StoreGeometry:
    """The recorded geometry (its backup when damaged, never restored), else the one the
    files show (a RocketMQ store): :func:`localstore.geometry.resolve_geometry` without its
    writes."""
    path = root / GEOMETRY_FILE
    if path.exists() or backup_path(path).exists():
        return load_geometry(path)
    return infer_geometry(root, {})


def _load_segments(segments: SegmentQueue, *, read_ahead: bool) -> None:
    """Take in the directory's segments read-only, closed until touched. The first file that
    is not a full segment following the previous one (being created, or prepared out of
    order) ends the list: what lies there is not written yet, as far as a reader knows."""
    if not segments.directory.is_dir():
        return
    names = sorted(
        n for n in os.listdir(segments.directory) if len(n) == NAME_DIGITS and n.isdigit()
    )
    size = segments.segment_size
    for name in names:
        path = segments.directory / name
        start = int(name)
        expected = segments.segments[-1].end_offset if segments.segments else start
        try:
            length = path.stat().st_size
        except FileNotFoundError:  # deleted by retention meanwhile
            continue
        if length != size or start != expected:
            break
        segment = MappedFile.existing(path, start, size, read_ahead=read_ahead, read_only=True)
        segment.wrote_position = segment.flushed_position = size
        segments.segments.append(segment)


def _queue_names(directory: Path) -> list[tuple[str, int]]:
    """(topic, queue id) of every queue directory under ``consumequeue/``."""
    if not directory.is_dir():
        return []
    return [
        (topic.name, int(queue.name))
        for topic in sorted(directory.iterdir())
        if topic.is_dir()
        for queue in sorted(topic.iterdir())
        if queue.name.isdigit() and queue.is_dir()
    ]


def _load_queue(queue: ConsumeQueue, commitlog_min: int) -> None:
    """Find the queue's valid units as :meth:`ConsumeQueue.load` does, deleting nothing: a
    trailing file without units (prepared ahead) is left out, not removed."""
    _load_segments(queue.segments, read_ahead=False)
    segments = queue.segments.segments
    while segments:
        last = segments[-1]
        valid = valid_prefix_units(last.view, last.size // UNIT_SIZE)
        last.wrote_position = last.flushed_position = valid * UNIT_SIZE
        if valid or len(segments) == 1:
            break
        segments.pop().close()
    if segments:
        first = segments[0]
        blanks = filler_prefix_units(first.view, first.wrote_position // UNIT_SIZE)
        queue.min_logic_offset = first.start_offset + blanks * UNIT_SIZE
        correct_min_offset(queue, commitlog_min)  # reads units only


def _record_whole(commitlog: CommitLog, phys_offset: int, size: int) -> bool:
    """Whether a valid record of ``size`` bytes starts at ``phys_offset`` (frame rules,
    PHYSICALOFFSET and body CRC)."""
    segment = commitlog.segments.find(phys_offset)
    if segment is None:
        return False
    view, pos = segment.view, phys_offset - segment.start_offset
    if pos + size > segment.size or size <= 0:
        return False
    return (
        INT.unpack_from(view, pos)[0] == size
        and frame_problem(view, pos, segment.size, phys_offset=phys_offset, check_crc=True) is None
    )


def _last_whole_unit_phys(queue: ConsumeQueue, commitlog: CommitLog) -> int | None:
    """The commitlog offset of the queue's newest unit whose record is whole, or None. Units
    follow the log's order and whole records are a prefix of it, so a binary search."""
    lo, hi = queue.min_offset, queue.max_offset  # the last whole unit is in [lo - 1, hi)
    if hi <= lo:
        return None
    if _record_whole(commitlog, *queue.unit_head(hi - 1)):
        return queue.unit_head(hi - 1)[0]
    hi -= 1
    while lo < hi:  # the first unit that is not whole is in [lo, hi]
        mid = (lo + hi) // 2
        if _record_whole(commitlog, *queue.unit_head(mid)):
            lo = mid + 1
        else:
            hi = mid
    return queue.unit_head(lo - 1)[0] if lo > queue.min_offset else None


def _walk_start(commitlog: CommitLog, queues: QueueRegistry) -> int:
    """Where the walk for the visible end starts: the newest whole record a queue points at
    (every record before it was written before it), else the log's first byte."""
    starts = [_last_whole_unit_phys(queue, commitlog) for queue in queues.queues.values()]
    known = [start for start in starts if start is not None]
    return max(known, default=commitlog.min_offset)


def _visible_end(commitlog: CommitLog, start: int) -> int:
    """The end of the valid records walked from ``start`` (body CRCs checked), across segment
    ends; the first position without a valid record ends it."""
    end = position = start
    while (segment := commitlog.segments.find(position)) is not None:
        base = segment.start_offset
        pos_after, count, status = walk_segment(
            segment.view, base, segment.size, position - base, segment.size, True
        )
        if count:
            end = base + pos_after
        if status == WALK_INVALID:
            break
        position = base + segment.size
    return end


def _cut_log(commitlog: CommitLog, end: int) -> None:
    """Positions of the snapshot: the log ends at ``end`` (later segments are left out, the
    first always kept so that the min offset stays right). Nothing on disk changes."""
    segments = commitlog.segments.segments
    while len(segments) > 1 and segments[-1].start_offset >= end:
        segments.pop().close()
    for segment in segments:
        segment.wrote_position = segment.flushed_position = max(
            0, min(segment.size, end - segment.start_offset)
        )
    commitlog.max_offset = commitlog.flushed_offset = end


def _cut_queue(queue: ConsumeQueue, end: int) -> None:
    """Serve only the units whose record ends at or before ``end`` (as recovery's
    :meth:`ConsumeQueue.truncate_beyond`, in the positions only)."""
    segments = queue.segments.segments
    while segments:
        last = segments[-1]
        keep = units_ending_within(last.view, last.wrote_position // UNIT_SIZE, end)
        last.wrote_position = last.flushed_position = keep * UNIT_SIZE
        if keep == 0 and len(segments) > 1:
            segments.pop().close()
            continue
        break
    queue.min_logic_offset = min(queue.min_logic_offset, queue.segments.max_offset)
    if queue.max_offset > queue.min_offset:
        phys, size = queue.unit_head(queue.max_offset - 1)
        queue.max_phys_offset = phys + size


def _open_key_index(root: Path, geometry: StoreGeometry) -> IndexService | None:
    """The key index files, read-only: those of the full length with a sound header (one
    being created is left out). The newest one's header lags its entries while the holder
    writes it: its chains are followed as far as they are written and its time span is
    taken as open-ended."""
    if not geometry.index_enabled:
        return None
    service = IndexService(root / "index", geometry.index_slots, geometry.index_entries)
    directory = service.directory
    names = sorted(n for n in os.listdir(directory) if n.isdigit()) if directory.is_dir() else []
    try:
        for name in names:
            path = directory / name
            try:
                if path.stat().st_size != service.file_size:
                    continue
                index_file = IndexFile(path, service.slots, service.entries, read_only=True)
            except (FileNotFoundError, ValueError):
                continue
            if not index_file.is_sound:
                index_file.close()
                continue
            service.files.append(index_file)
    except BaseException:  # permission denied, out of memory: unmap what was mapped
        for index_file in service.files:
            index_file.close()
        raise
    if service.files:
        newest = service.files[-1]
        newest.index_count = newest.entries
        newest.end_timestamp = _LAST_TIME_MS
    return service
