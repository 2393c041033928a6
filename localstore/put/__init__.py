"""The put paths: a batch put (:mod:`.path`, with its checks in :mod:`.checks`) and the
single-message fast path (:mod:`.single`) append records to the commitlog and units to their
queues all or nothing. What both paths share lives apart from either, so that neither refers to
the other: the per-queue put state (:mod:`.queue_state`) and the key index they feed
(:mod:`.key_feed`). The writer threads (:mod:`.writer`, :mod:`.async_writer`) serve puts from
many threads and from asyncio."""
