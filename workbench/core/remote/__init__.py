"""Runs on other machines, reached with the user's own OpenSSH: start, watch, stop, bring back. Qt-free.

:mod:`.ssh` runs the system ``ssh`` and ``rsync`` (host keys always checked,
every remote word quoted); :mod:`.bundle` makes a run file ready for another
machine (its weights, data and code under relative names); :mod:`.jobs` starts
a run detached on a host, reads its state, stops it with a save and pulls its
folder back. ``workbench remote`` (:mod:`workbench.cli.remote`) is their command.
"""

from workbench.core.remote.jobs import DEFAULT_REMOTE_DIR, RemoteStatus, Started, pull, start, status, stop
from workbench.core.remote.ssh import RemoteError, Ssh

__all__ = ["DEFAULT_REMOTE_DIR", "RemoteError", "RemoteStatus", "Ssh", "Started", "pull", "start", "status", "stop"]
