"""The disk under every command: one reader with limits for each file read back
(:mod:`~noisylabels.disk.reading`), atomic writes and a full disk as one error
(:mod:`~noisylabels.disk.storage`), the lock that makes one process the writer of a folder
(:mod:`~noisylabels.disk.lock`), and the run a command that reads one takes from a folder of
several (:mod:`~noisylabels.disk.runs`). It imports nothing of the project but its errors."""
