"""``workbench.remote``: run on an SSH host or a SLURM cluster from Python, with your own ssh.

``submit(run_toml, host, *, slurm=False, nodes=1, gpus_per_node=None, partition=None, time=None, sync=(),
trust=False) -> RemoteRun``; ``RemoteRun.id``, ``.host``, ``.run_dir`` (remote), ``.state()`` (``queued``,
``running``, ``completed``, ``stopped``, ``crashed``, ``cancelled``), ``.attach(steer=True)`` (the handle
``workbench.connect`` gives, through a tunnel Workbench makes, reconnecting by itself, closed with the handle),
``.pull(dest=None) -> Path``, ``.cancel()``; ``runs(host) -> list[RemoteRun]`` (the runs ``submit`` started;
``runs_with_states(host)``: each with its state, in the same one ssh command);
``scripts(host) -> list[RemoteScript]`` (everything that waits for a window there: listening runs and scripts that
called ``workbench.attach``; ``RemoteScript.attach(steer=True)`` as ``RemoteRun.attach``). See
:mod:`workbench.core.remote.handle`. Importing this module imports torch (the run file's reader) but not Qt.
"""

from workbench.core.remote.handle import STATES, RemoteRun, runs, runs_with_states, submit
from workbench.core.remote.ssh import RemoteError
from workbench.core.remote.waiting import RemoteScript, scripts

__all__ = ["submit", "runs", "runs_with_states", "scripts", "RemoteRun", "RemoteScript", "RemoteError", "STATES"]
