"""Atomic file writes, and the removal of the temporary files an interrupted write left.

A crash in the middle of a save must never damage the previous file: every write
goes to a temporary file in the same folder, is flushed and fsync'ed, and then
replaces the target with ``os.replace`` (atomic on POSIX and Windows).

A process killed mid-write (SIGKILL, power loss) cannot remove its temporary
file. Its name says whose it is -- ``.NAME.<pid>-<host>-<random>.tmp``: the
target's name, the writer's process id, 8 hex digits of its host name and
:func:`tempfile.mkstemp`'s 8 random characters -- so the next save into that
folder, or the next checkpoint opened from it, removes it once its writer is
gone (:func:`remove_stale_temps`). Writes by older Workbench versions
(``.NAME.<random>.tmp``, no pid) are removed once untouched for
:data:`STALE_AFTER_S`, but only for the names those versions wrote into run and
checkpoint folders (:func:`is_legacy_target`: checkpoints and the run files):
that bare form is also the usual ``tempfile.mkstemp`` idiom of other programs,
whose ``.thesis.docx.q1w2e3r4.tmp`` is never touched.
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import tempfile
import time
import zlib
from pathlib import Path
from typing import IO, Any, Callable

#: A temporary file without a live writer on this host, or of another host, is
#: removed once not written for this long (s): a live writer keeps its mtime fresh.
STALE_AFTER_S = 600.0
#: A temporary file whose pid is alive is still removed after this long (s): the pid was reused.
ORPHAN_AFTER_S = 24 * 3600.0

# mkstemp's random part: 8 of "abcdefghijklmnopqrstuvwxyz0123456789_" (CPython's tempfile._RandomNameSequence)
_TEMP_NAME = re.compile(r"^\.(?P<name>.+?)\.(?:(?P<pid>\d+)-(?P<host>[0-9a-f]{8})-)?[a-z0-9_]{8}\.tmp$")
#: Suffixes of the checkpoints older Workbench versions saved (run checkpoints, File > Save).
LEGACY_SUFFIXES = (".pt", ".pth", ".ckpt", ".safetensors")
#: The other files older Workbench versions wrote atomically into a run folder.
LEGACY_NAMES = frozenset({"status.json", "run.toml", "metrics.csv", "lr_find.csv"})
#: The cache files older Workbench versions wrote atomically (``contrib``'s own writer, now
#: :func:`atomic_write`): timm's name lists and the architecture index.
LEGACY_CACHE = re.compile(r"timm-.+-names\.json|.+\.json\.gz")


def is_legacy_target(name: str) -> bool:
    """Whether older Workbench versions wrote ``name`` atomically (so ``.NAME.<random>.tmp`` may be theirs).

    Checkpoints (:data:`LEGACY_SUFFIXES`: ``last.pt``, ``best.pt``, ``init.pt``,
    ``epoch_3.pt``, a saved ``model.safetensors``), the run folder's own files
    (:data:`LEGACY_NAMES`) and the cache's (:data:`LEGACY_CACHE`). A document's name (``thesis.docx``, ``data.csv``) is not.
    """
    return name.lower().endswith(LEGACY_SUFFIXES) or name in LEGACY_NAMES or bool(LEGACY_CACHE.fullmatch(name))


def _host_tag() -> str:
    """8 hex digits naming this host (CRC-32 of its name): a pid means something on its own host only."""
    return f"{zlib.crc32(socket.gethostname().encode('utf-8', 'replace')):08x}"


_HOST = _host_tag()


def temp_prefix(name: str) -> str:
    """The start of this process's temporary file names for target ``name`` (``.NAME.<pid>-<host>-``)."""
    return f".{name}.{os.getpid()}-{_HOST}-"


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (unknown counts as alive).

    ``os.kill(pid, 0)`` only checks on POSIX; on Windows ``os.kill`` would end the process.
    """
    if os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True
    return True


def is_stale_temp(name: str, mtime: float, now: float | None = None) -> bool:
    """Whether a file named ``name``, last modified at ``mtime``, is a temporary file nobody writes.

    Parameters
    ----------
    name : str
        A file name (no folder).
    mtime : float
        Its modification time (s since the epoch).
    now : float, optional
        The current time (default ``time.time()``).

    Returns
    -------
    bool
        True for Workbench's own temporary names only (see the module docstring):
        of this host with a dead writer pid; or untouched for :data:`STALE_AFTER_S`
        (no pid, or another host's); or older than :data:`ORPHAN_AFTER_S`. A name
        without a pid counts only for a target :func:`is_legacy_target` accepts.
    """
    match = _TEMP_NAME.match(name)
    if match is None or (match["pid"] is None and not is_legacy_target(match["name"])):
        return False
    age = (time.time() if now is None else now) - mtime
    if age >= ORPHAN_AFTER_S:
        return True
    pid = match["pid"]
    if pid is not None and match["host"] == _HOST:
        return int(pid) != os.getpid() and not _pid_alive(int(pid))
    return age >= STALE_AFTER_S


def remove_stale_temps(folder: str | Path) -> list[Path]:
    """Remove the temporary files that interrupted writes left in ``folder`` (:func:`is_stale_temp`).

    Only regular files are considered (never a link, FIFO or folder); files that
    vanish or cannot be removed meanwhile are skipped silently.

    Parameters
    ----------
    folder : str or Path

    Returns
    -------
    list of Path
        The files removed.
    """
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        if not (entry.name.startswith(".") and entry.name.endswith(".tmp")):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and is_stale_temp(entry.name, st.st_mtime, now):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            continue
    return removed


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], Any]) -> Path:
    """Write a file atomically through a callback.

    Stale temporary files of earlier interrupted writes in the same folder are
    removed first (:func:`remove_stale_temps`).

    Parameters
    ----------
    path : str or Path
        Target file. Its folder is created if missing.
    write : callable
        Called with a binary file object open for writing.

    Returns
    -------
    Path
        The target path.

    Raises
    ------
    OSError
        When the folder cannot be written; the previous file, if any, is untouched
        and no temporary file is left behind.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path.name), suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically. See :func:`atomic_write`."""
    return atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically. See :func:`atomic_write`."""
    return atomic_write(path, lambda f: f.write(text.encode(encoding)))


def atomic_save(obj: Any, path: str | Path, *, digest: bool = True) -> Path:
    """``torch.save(obj)`` to ``path`` atomically, with a digest of its tensors. See :func:`atomic_write`.

    Parameters
    ----------
    obj : Any
        A checkpoint payload (loadable with ``weights_only=True`` once saved).
    path : str or Path
    digest : bool
        Store :func:`workbench.core.digest.add_digest`'s entry in a dict ``obj``
        (default True) so every read can verify the file. A dict made only of
        tensors (a bare state_dict) is saved as it is: an extra entry would stop
        it reading as a state_dict.

    Returns
    -------
    Path

    Raises
    ------
    OSError
        The file could not be written; the previous file is unchanged.
    """
    import torch

    from workbench.core.digest import add_digest

    if digest and isinstance(obj, dict) and not all(isinstance(v, torch.Tensor) for v in obj.values()):
        obj = add_digest(obj)
    return atomic_write(path, lambda f: torch.save(obj, f))


def append_whole(path: str | Path, data: bytes) -> None:
    """Append ``data`` to ``path`` whole or not at all.

    A short write (a full disk) is cut back to the file's size before it, so that
    what is appended after it never follows half a line; the OSError is raised again.

    Raises
    ------
    OSError
        The file cannot be opened or written (it is as it was before the call).
    """
    with open(path, "ab", buffering=0) as f:
        start = f.seek(0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                view = view[f.write(view):]
        except OSError:
            try:
                f.truncate(start)
            except OSError:
                pass  # a reader drops a last line cut short (read_jsonl, StepsCSV)
            raise


def append_jsonl(path: str | Path, rows: list[dict]) -> None:
    """Append ``rows`` to a JSON Lines file, one object a line, all of them or none (:func:`append_whole`).

    Raises
    ------
    OSError
        As :func:`append_whole`.
    """
    if rows:
        append_whole(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8"))


def read_jsonl(path: str | Path, max_bytes: int | None = None) -> list[dict]:
    """The objects of a JSON Lines file, in order; a line that is not a JSON object is left out; [] when none,
    or when ``path`` is not a regular file (a FIFO, a device) or cannot be read.

    With ``max_bytes``, at most the file's last ``max_bytes`` bytes are read (its first, partial line then
    left out): a file that grows for a whole run is never read whole.
    """
    path = Path(path)
    try:
        if not path.is_file():
            return []
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            cut = max_bytes is not None and size > max_bytes
            if cut:
                f.seek(size - max_bytes)
            data = f.read(max_bytes if cut else -1)
    except OSError:
        return []
    if cut:
        data = data.split(b"\n", 1)[-1]
    rows = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows
