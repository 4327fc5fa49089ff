"""Which image files already passed the pre-flight check, per folder: a Start re-checks only what changed.

A run's pre-flight opens every image of an ImageFolder (``PIL.Image.verify``),
45-75 s for 1,800 photos on a 2-core machine; a second Start on the same
folder spent them again. :class:`ImageCheckCache` remembers, for the files that
verified, their size and modification time (``st_size``, ``st_mtime_ns``) in
one JSON file per folder under Workbench's cache folder: a file whose size and
mtime are unchanged is not opened again. Unreadable files are never
remembered, so they are reported at every Start until fixed.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from workbench.core import contrib
from workbench.core.files import atomic_write_text

__all__ = ["ImageCheckCache", "MAX_CACHE_BYTES"]

#: A cache file larger than this is ignored (and rewritten): ~2 M paths; reading it stays bounded.
MAX_CACHE_BYTES = 256 * 1024 * 1024
_VERSION = 1


def _stamp(path: str) -> list[int] | None:
    """``[st_size, st_mtime_ns]`` of ``path``, or None when it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


class ImageCheckCache:
    """The image files of one folder known to verify, keyed by their path below the folder.

    Parameters
    ----------
    paths : list of str
        The image files a check is about; their common folder names the cache file.
    folder : str or Path, optional
        Where cache files live; default ``<cache_dir>/image_checks``
        (:func:`workbench.core.contrib.cache_dir`).
    """

    def __init__(self, paths: list[str], folder: str | Path | None = None):
        self.root = os.path.commonpath([os.path.abspath(p) for p in paths]) if paths else ""
        if self.root and not os.path.isdir(self.root):
            self.root = os.path.dirname(self.root)  # a single file: its folder
        base = Path(folder) if folder is not None else contrib.cache_dir() / "image_checks"
        digest = hashlib.sha256(self.root.encode("utf-8", "surrogateescape")).hexdigest()[:24]
        self.file = base / f"{digest}.json"
        self._known = self._read()
        self._changed = False

    def _read(self) -> dict[str, list[int]]:
        try:
            if self.file.stat().st_size > MAX_CACHE_BYTES:
                return {}
            data = json.loads(self.file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # none yet, or damaged: everything is checked again
        if not isinstance(data, dict) or data.get("version") != _VERSION or data.get("root") != self.root:
            return {}
        files = data.get("files")
        return files if isinstance(files, dict) else {}

    def _key(self, path: str) -> str:
        return os.path.relpath(os.path.abspath(path), self.root) if self.root else path

    def unchanged(self, path: str) -> bool:
        """True when ``path`` verified before and its size and mtime are the same now."""
        known = self._known.get(self._key(path))
        return known is not None and known == _stamp(path)

    def remember(self, path: str) -> None:
        """Record that ``path`` verified, with its current size and mtime."""
        stamp = _stamp(path)
        if stamp is not None and self._known.get(self._key(path)) != stamp:
            self._known[self._key(path)] = stamp
            self._changed = True

    def save(self) -> None:
        """Write the cache file atomically when something was remembered; a failed write is ignored.

        The cache only saves time: a full disk or a read-only cache folder
        means the next Start checks again, never that this one fails.
        """
        if not self._changed:
            return
        text = json.dumps({"version": _VERSION, "root": self.root, "files": self._known}, separators=(",", ":"))
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.file, text)
        except OSError:
            return
        self._changed = False
