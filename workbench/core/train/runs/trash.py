"""Deleting a run folder to the system trash, and putting it back (the Runs dock's Delete and Undo).

The move to the trash is ``send2trash``'s (the freedesktop.org trash on Linux, the
Recycle Bin on Windows, the Finder's trash on macOS). It does not say where the
folder went, and no library restores; on the freedesktop.org trash (Linux and the
BSDs) :func:`restore_run` does, following the spec: the item is ``files/NAME``
beside ``info/NAME.trashinfo``, whose ``Path=`` is the percent-encoded original
path (https://specifications.freedesktop.org/trash-spec/). Elsewhere an undo
says to restore the folder from the system trash. Qt-free.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from workbench.core.run_folder.processes import refuse_if_training

__all__ = ["TrashedRun", "trash_run", "restore_run"]


@dataclass(frozen=True)
class TrashedRun:
    """A run folder in the trash.

    Attributes
    ----------
    original : Path
        Where it was (absolute).
    item : Path or None
        Where it is now (``.../Trash/files/NAME``); None where the trash is not freedesktop.org's.
    info : Path or None
        Its ``.trashinfo`` file.
    """

    original: Path
    item: Path | None
    info: Path | None


def _trash_dirs(path: Path) -> list[Path]:
    """The freedesktop.org trash folders that may hold ``path``: the home trash, then its mount's."""
    home = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "Trash"
    top = path
    while not os.path.ismount(top) and top.parent != top:
        top = top.parent
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return [home, top / f".Trash-{uid}", top / ".Trash" / str(uid)]


def _find(original: Path) -> tuple[Path, Path] | tuple[None, None]:
    """``(item, info)`` of the newest trash entry whose ``Path=`` is ``original``."""
    best = None
    for trash in _trash_dirs(original):
        info_dir = trash / "info"
        if not info_dir.is_dir():
            continue
        for info in info_dir.glob("*.trashinfo"):
            try:
                fields = dict(line.split("=", 1) for line in info.read_text(encoding="utf-8").splitlines()
                              if "=" in line)
            except OSError:
                continue
            where = unquote(fields.get("Path", ""))
            if not os.path.isabs(where):  # a mount's trash records paths relative to its top folder
                where = str(trash.parent / where)
            if Path(where) == original:
                key = (fields.get("DeletionDate", ""), info.stat().st_mtime_ns)
                if best is None or key > best[0]:
                    best = (key, trash / "files" / info.name[: -len(".trashinfo")], info)
    return (best[1], best[2]) if best else (None, None)


def trash_run(folder: str | Path) -> TrashedRun:
    """Move a run folder to the system trash.

    Raises
    ------
    FileNotFoundError
        ``folder`` is gone.
    RunIsTraining
        A live process is training in ``folder`` (an OSError; its message says to stop the run first).
    OSError
        The trash refused it (its message says why).
    """
    from send2trash import send2trash
    from send2trash.exceptions import TrashPermissionError

    original = Path(folder).absolute()
    if not original.is_dir():
        raise FileNotFoundError(f"{original}: no such run folder")
    refuse_if_training(original, "delete")
    try:
        send2trash(str(original))
    except TrashPermissionError as exc:
        raise OSError(f"{original}: the trash refused it ({exc})") from exc
    item, info = _find(original)
    return TrashedRun(original, item, info)


def restore_run(trashed: TrashedRun) -> Path:
    """Put a trashed run folder back where it was; the path.

    Raises
    ------
    FileExistsError
        Something of that name is there again (nothing is overwritten).
    FileNotFoundError
        The folder is no longer in the trash (emptied), or this trash cannot be restored
        from here (restore it with the system's file manager).
    """
    if trashed.item is None or not trashed.item.exists():
        raise FileNotFoundError(f"{trashed.original.name} is no longer in the trash here: "
                                "restore it with the system's file manager")
    if trashed.original.exists():
        raise FileExistsError(f"{trashed.original} exists again: rename it first")
    trashed.item.rename(trashed.original)
    if trashed.info is not None:
        trashed.info.unlink(missing_ok=True)
    return trashed.original
