"""Files the store keeps: memory-mapped segments and their process-wide descriptor pool, segment
lists, files replaced atomically, JSON files of a checked shape, the directory lock, and the
store's root (made, and told apart from a directory that holds something else)."""
