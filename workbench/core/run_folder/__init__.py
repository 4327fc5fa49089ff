"""Total readers of the files of a run folder: whatever is on disk, an answer or a :class:`~.reading.RunFileError`.

A run folder (:mod:`workbench.core.train.runs.folder`) is written by the trainer, but
anything may be found there later: a file of the wrong type, bytes that are not
UTF-8, NUL bytes left by a power loss, a truncated line, a FIFO or a device, a
symbolic link to ``/dev/zero``, a file of gigabytes. Every reader here either
returns what the file says or raises a ``RunFileError`` naming the file and the
reason, promptly and in bounded memory. One module per thing read:
:mod:`~.reading` (opening safely; small files and a file named by path),
:mod:`~.status` (``status.json``), :mod:`~.run_toml` (``run.toml``),
:mod:`~.metrics_csv` (``metrics.csv``), :mod:`~.processes` (whether a recorded
pid is a live Workbench training process) and :mod:`~.printable` (text escaped
for a terminal). Qt-free; imports nothing of ``workbench.core.train``.
"""
