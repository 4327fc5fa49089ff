"""How a window finds the scripts waiting on this machine: one small JSON file per script.

Each :class:`~workbench.core.attach.script.Attached` writes
``<runtime dir>/workbench-attach/<pid>-<port>.json`` (the folder ``0o700``,
the file ``0o600``: readable by the user only, since it holds the token) and
removes it when it closes. The runtime directory is ``$XDG_RUNTIME_DIR``
(the per-user directory of the freedesktop base directory specification),
else the system temp directory with the user id in the folder's name.
``WORKBENCH_ATTACH_DIR`` overrides the folder (tests).

The window reads that folder as it would a stranger's (:func:`scan_waiting`): nothing at all when the folder
is not this user's own or others may write into it (one line says why), and of its ``*.json`` only regular
files this user owns, opened without following a link and without blocking (``O_NOFOLLOW | O_NONBLOCK``,
then ``fstat``: a FIFO, a device or a link to ``/dev/zero`` is never read), at most
:data:`MAX_DISCOVERY_BYTES` each, their fields checked.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from workbench.core.files import atomic_write_text

__all__ = ["discovery_dir", "write_discovery", "remove_discovery", "list_waiting", "scan_waiting", "Waiting",
           "MAX_DISCOVERY_BYTES", "MAX_DISCOVERY_FILES"]

log = logging.getLogger("workbench.attach")

#: The largest discovery file read (bytes): a script writes ~300 (address, token, pid, name, run folder).
MAX_DISCOVERY_BYTES = 64 * 1024
#: The most ``*.json`` names of the folder looked at (one per running script; more is not a user's own doing).
MAX_DISCOVERY_FILES = 1_000
#: Each field a discovery file may hold, and its type (a file with another type in one is skipped).
_FIELDS = {"address": str, "token": str, "pid": int, "port": int, "host": str, "name": str, "run_dir": str,
           "model": str, "started": (int, float)}


def _folder() -> Path:
    override = os.environ.get("WORKBENCH_ATTACH_DIR")
    if override:
        return Path(override)
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "workbench-attach"
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"workbench-attach-{uid}"


def discovery_dir() -> Path:
    """The folder of the discovery files (created ``0o700`` when missing; made ``0o700`` when looser).

    Raises
    ------
    OSError
        It cannot be created, or it belongs to another user (someone made it first in the shared temp dir).
    """
    folder = _folder()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if hasattr(os, "getuid"):
        st = folder.stat()
        if st.st_uid != os.getuid():  # a folder someone else made first (the shared temp dir): never use it
            raise OSError(f"{folder} belongs to another user; set WORKBENCH_ATTACH_DIR or XDG_RUNTIME_DIR")
        if st.st_mode & 0o077:
            os.chmod(folder, 0o700)
    return folder


def write_discovery(info: dict) -> Path:
    """Write ``info`` (``address``, ``token``, ``pid``, ``name``...) as this script's file; its path.

    Raises
    ------
    OSError
        The folder cannot be written.
    """
    path = discovery_dir() / f"{info['pid']}-{info['port']}.json"
    old = os.umask(0o077)
    try:
        atomic_write_text(path, json.dumps(info, indent=1))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    return path


def remove_discovery(path: str | Path | None) -> None:
    """Remove a discovery file (no error when it is gone)."""
    if path is not None:
        try:
            os.unlink(path)
        except OSError:
            pass


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class Waiting:
    """What :func:`scan_waiting` found: the ``scripts`` (dicts, newest first) and, when the folder itself
    was refused or unreadable, the one line saying why (``problem``; then ``scripts`` is empty)."""

    scripts: list[dict] = field(default_factory=list)
    problem: str | None = None


def list_waiting() -> list[dict]:
    """The scripts waiting on this machine, newest first: each file's dict plus ``"path"``.

    See :func:`scan_waiting` (a refused folder is logged and lists nothing).
    """
    found = scan_waiting()
    if found.problem:
        log.warning("workbench attach: %s", found.problem)
    return found.scripts


def scan_waiting() -> Waiting:
    """The scripts waiting on this machine, read with care (see the module docstring); never raises.

    Files of processes that are gone are removed; files that are not this user's regular files, are larger
    than :data:`MAX_DISCOVERY_BYTES`, or do not hold the fields of one are skipped. A folder that is not
    this user's own, or that the group or others may write into, lists nothing, and ``problem`` says why.
    """
    folder = _folder()
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        dfd = os.open(folder, flags)
    except FileNotFoundError:
        return Waiting()
    except OSError as exc:
        return Waiting(problem=f"the discovery folder {folder} cannot be read ({exc.strerror or exc}); "
                               "nothing listed")
    try:
        problem = _folder_problem(os.fstat(dfd), folder)
        if problem:
            return Waiting(problem=problem)
        names = sorted(n for n in os.listdir(dfd) if n.endswith(".json"))[:MAX_DISCOVERY_FILES]
        out = [info for info in (_read_one(dfd, folder, n) for n in names) if info is not None]
    except OSError as exc:
        return Waiting(problem=f"the discovery folder {folder} cannot be read ({exc.strerror or exc}); "
                               "nothing listed")
    finally:
        os.close(dfd)
    out.sort(key=lambda i: -float(i.get("started") or 0))
    return Waiting(out)


def _folder_problem(st: os.stat_result, folder: Path) -> str | None:
    if not stat.S_ISDIR(st.st_mode):
        return f"the discovery folder {folder} is not a folder; nothing listed"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return (f"the discovery folder {folder} belongs to another user (uid {st.st_uid}); nothing listed: "
                "set WORKBENCH_ATTACH_DIR or XDG_RUNTIME_DIR to a folder of your own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (f"the discovery folder {folder} is writable by others (mode {stat.S_IMODE(st.st_mode):o}), "
                f"so its files may not be your scripts'; nothing listed: chmod 700 {folder}")
    return None


def _read_one(dfd: int, folder: Path, name: str) -> dict | None:
    """One discovery file's dict plus ``"path"``, or None (skipped; a gone process's file is removed)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(name, flags, dir_fd=dfd)  # a link fails here (ELOOP); a FIFO opens without a writer
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
            return None  # a FIFO, a device, a folder; another user's file (its address and token are not ours)
        if st.st_size > MAX_DISCOVERY_BYTES:
            return None
        data = b""
        while len(data) <= MAX_DISCOVERY_BYTES:  # the size said at fstat may grow: read no more than the cap
            chunk = os.read(fd, MAX_DISCOVERY_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > MAX_DISCOVERY_BYTES:
        return None
    try:
        info = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    if not isinstance(info, dict) or not isinstance(info.get("address"), str) or not all(
            isinstance(info[k], t) and not isinstance(info[k], bool) for k, t in _FIELDS.items() if k in info):
        return None
    if not _alive(info.get("pid")):
        try:
            os.unlink(name, dir_fd=dfd)
        except OSError:
            pass
        return None
    info["path"] = str(folder / name)
    return info
