"""The key index: RocketMQ's hash-slot index files (:mod:`.index_file`), the service that fills
and queries them (:mod:`.service`), and the child process that can build them off the put path
(:mod:`.process`, :mod:`.worker`, speaking :mod:`.protocol`)."""
