"""``workbench.remote``: run on an SSH host or a SLURM cluster from Python, with your own ssh.

``submit(run_toml, host, *, slurm=False, nodes=1, gpus_per_node=None, partition=None, time=None, sync=(),
trust=False) -> RemoteRun``; ``RemoteRun.id``, ``.host``, ``.run_dir`` (remote), ``.state()`` (``queued``,
``running``, ``completed``, ``stopped``, ``crashed``, ``cancelled``), ``.pull(dest=None) -> Path``,
``.cancel()``; ``runs(host) -> list[RemoteRun]``. See :mod:`workbench.core.remote.handle`. Importing this
module imports torch (the run file's reader) but not Qt.
"""

from workbench.core.remote.handle import STATES, RemoteRun, runs, submit
from workbench.core.remote.ssh import RemoteError

__all__ = ["submit", "runs", "RemoteRun", "RemoteError", "STATES"]
