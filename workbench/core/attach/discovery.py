"""How a window finds the scripts waiting on this machine: one small JSON file per script.

Each :class:`~workbench.core.attach.script.Attached` writes
``<runtime dir>/workbench-attach/<pid>-<port>.json`` (the folder ``0o700``,
the file ``0o600``: readable by the user only, since it holds the token) and
removes it when it closes. The runtime directory is ``$XDG_RUNTIME_DIR``
(the per-user directory of the freedesktop base directory specification),
else the system temp directory with the user id in the folder's name.
``WORKBENCH_ATTACH_DIR`` overrides the folder (tests).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from workbench.core.files import atomic_write_text

__all__ = ["discovery_dir", "write_discovery", "remove_discovery", "list_waiting"]


def discovery_dir() -> Path:
    """The folder of the discovery files (created ``0o700`` when missing; made ``0o700`` when looser).

    Raises
    ------
    OSError
        It cannot be created, or it belongs to another user (someone made it first in the shared temp dir).
    """
    override = os.environ.get("WORKBENCH_ATTACH_DIR")
    if override:
        folder = Path(override)
    elif os.environ.get("XDG_RUNTIME_DIR"):
        folder = Path(os.environ["XDG_RUNTIME_DIR"]) / "workbench-attach"
    else:
        uid = os.getuid() if hasattr(os, "getuid") else "user"
        folder = Path(tempfile.gettempdir()) / f"workbench-attach-{uid}"
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


def list_waiting() -> list[dict]:
    """The scripts waiting on this machine, newest first: each file's dict plus ``"path"``.

    Files of processes that are gone are removed; unreadable ones are skipped.
    """
    out = []
    try:
        files = list(discovery_dir().glob("*.json"))
    except OSError:
        return []
    for path in files:
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(info, dict) or not isinstance(info.get("address"), str):
            continue
        if not _alive(info.get("pid")):
            remove_discovery(path)
            continue
        info["path"] = str(path)
        out.append(info)
    out.sort(key=lambda i: -float(i.get("started") or 0))
    return out
