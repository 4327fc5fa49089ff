"""A real full disk for the "a failed write never ends training" tests: a small tmpfs (root only)."""

from __future__ import annotations

import errno
import os
import subprocess

import pytest


@pytest.fixture
def small_disk(tmp_path, request):
    """A 64 KiB tmpfs: a real full disk (mounting needs root; skipped with the reason elsewhere).

    Another size: ``@pytest.mark.parametrize("small_disk", ["160k"], indirect=True)``."""
    size = getattr(request, "param", "64k")
    if os.geteuid() != 0:
        pytest.skip("a full disk here is a 64 KiB tmpfs, and mounting one needs root")
    where = tmp_path / "disk"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True,
                          text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill_disk(disk) -> "os.PathLike":
    """Fill ``disk`` to its last byte; the filler file (delete it to make room)."""
    filler = disk / "filler"
    with open(filler, "ab", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler
