"""Files the store keeps: memory-mapped segments and their process-wide descriptor pool, segment
lists, files replaced atomically, JSON files of a checked shape, the directory lock, the store's
root (made, and told apart from a directory that holds something else: :mod:`.store_directory`),
and deleted files whose mappings close after a grace period (:mod:`.retired`)."""
