"""The put paths: a batch put (:mod:`.path`) and the single-message fast path (:mod:`.single`)
append records to the commitlog and units to their queues all or nothing; the writer threads
(:mod:`.writer`, :mod:`.async_writer`) serve puts from many threads and from asyncio."""
