"""What the store runs besides its files: periodic service threads (:mod:`.periodic`), child
processes and their pipe framing (:mod:`.worker_command`, :mod:`.pipe_frames`), and a close that
runs every step (:mod:`.closing`)."""
