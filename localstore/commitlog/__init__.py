"""The commitlog: segments of records appended in order (:mod:`.log`), group commit and the
flush thread (:mod:`.flush`), the sparse offset index of record starts (:mod:`.offset_index`) and
the child process that syncs for ``sync_flush`` stores (:mod:`.sync_process`,
:mod:`.sync_worker`)."""
