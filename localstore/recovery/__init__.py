"""Opening a store that may have crashed or been damaged: the checkpoint (:mod:`.checkpoint`),
walks of the log that find its valid end and step over damage (:mod:`.log_scan`, in parallel
with :mod:`.parallel_scan` and :mod:`.scan_worker`), the record of kept damaged ranges
(:mod:`.damaged`), recovery itself (:mod:`.recover`) and ``verify`` (:mod:`.verify`)."""
