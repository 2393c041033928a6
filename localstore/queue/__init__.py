"""Consume queues: one per topic and queue id, 20-byte units pointing into the commitlog
(:mod:`.consume_queue`), kept in a registry (:mod:`.registry`), with a sparse time index each
(:mod:`.time_index`), the topic table (:mod:`.topics`), and dispatch, which turns records into
units and index entries (:mod:`.dispatch`)."""
