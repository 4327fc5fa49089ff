"""The files by which a window finds the scripts waiting on this machine (``workbench.core.attach.discovery``)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.core.attach.discovery import (MAX_DISCOVERY_BYTES, discovery_dir, list_waiting, remove_discovery,
                                             scan_waiting, write_discovery)

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]


def _info(pid: int, port: int, started: float) -> dict:
    return {"address": f"127.0.0.1:{port}", "port": port, "token": "t", "pid": pid, "name": "s", "started": started}


def test_a_file_is_written_for_this_user_only_and_listed_newest_first(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_ATTACH_DIR", str(tmp_path / "attach"))
    older = write_discovery(_info(os.getpid(), 1000, 1.0))
    newer = write_discovery(_info(os.getpid(), 1001, 2.0))
    assert stat.S_IMODE(discovery_dir().stat().st_mode) == 0o700
    assert stat.S_IMODE(older.stat().st_mode) == 0o600
    assert [(i["port"], i["path"]) for i in list_waiting()] == [(1001, str(newer)), (1000, str(older))]
    remove_discovery(newer)
    remove_discovery(newer)  # gone already: no error
    remove_discovery(None)
    assert [i["port"] for i in list_waiting()] == [1000]


def test_files_of_gone_processes_are_removed_and_damaged_ones_skipped(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_ATTACH_DIR", str(tmp_path / "attach"))
    gone = write_discovery(_info(2**22 + 12345, 1002, 1.0))  # above any Linux pid: no such process
    (discovery_dir() / "damaged.json").write_text("{not json")
    (discovery_dir() / "no-address.json").write_text('{"pid": 1}')
    assert list_waiting() == []
    assert not gone.exists() and (discovery_dir() / "damaged.json").exists()


def test_a_looser_folder_is_made_private(tmp_path, monkeypatch):
    folder = tmp_path / "attach"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    monkeypatch.setenv("WORKBENCH_ATTACH_DIR", str(folder))
    assert discovery_dir() == folder and stat.S_IMODE(folder.stat().st_mode) == 0o700


# ------------------------------------------------------------------ a folder read as a stranger's (issue 45)
LISTER = """
import resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))  # reading /dev/zero whole dies here, not the machine
from workbench.core.attach.discovery import scan_waiting
start = time.monotonic()
found = scan_waiting()
print("PORTS", sorted(i["port"] for i in found.scripts))
print("PROBLEM", found.problem)
print("SECONDS", time.monotonic() - start)
"""


def _scan_in_child(folder) -> dict:
    """``scan_waiting`` of ``folder`` in a child process, with a time (10 s) and a memory (2 GB) limit."""
    env = dict(os.environ, WORKBENCH_ATTACH_DIR=str(folder),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", LISTER], env=env, capture_output=True, text=True, timeout=10)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    return {"ports": eval(lines["PORTS"]), "problem": None if lines["PROBLEM"] == "None" else lines["PROBLEM"],
            "seconds": float(lines["SECONDS"])}


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """The discovery folder with one good file (port 1000, this process)."""
    monkeypatch.setenv("WORKBENCH_ATTACH_DIR", str(tmp_path / "attach"))
    write_discovery(_info(os.getpid(), 1000, 1.0))
    return discovery_dir()


@pytest.mark.parametrize("plant", ["fifo", "dev_zero_link", "link_to_a_good_file", "oversized", "folder"])
def test_what_is_not_a_small_regular_file_of_the_user_is_skipped_at_once(folder, plant):
    bad = folder / "9-2000.json"
    if plant == "fifo":
        os.mkfifo(bad)  # opened for reading, it blocks until a writer comes: never
    elif plant == "dev_zero_link":
        bad.symlink_to("/dev/zero")  # read to its end, it never ends
    elif plant == "link_to_a_good_file":
        elsewhere = folder.parent / "elsewhere.json"
        elsewhere.write_text(json.dumps(_info(os.getpid(), 2000, 2.0)))
        bad.symlink_to(elsewhere)
    elif plant == "oversized":
        bad.write_text(json.dumps(_info(os.getpid(), 2000, 2.0) | {"pad": "x" * MAX_DISCOVERY_BYTES}))
    else:
        bad.mkdir()
    got = _scan_in_child(folder)
    assert got["ports"] == [1000] and got["problem"] is None and got["seconds"] < 2, got


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_file_of_another_user_is_not_listed(folder):
    theirs = write_discovery(_info(os.getpid(), 2000, 2.0))
    os.chown(theirs, 65534, 65534)  # nobody's: its address and token would send this window to their script
    assert [i["port"] for i in list_waiting()] == [1000]


def test_a_file_of_another_user_is_not_listed_uid_seen_as_another(folder, monkeypatch):
    """Without root: the files are this user's, and the lister is told it runs as someone else."""
    real = os.getuid()
    calls = []

    def uid():  # the folder's check sees the real uid (it is its owner's); every file's check sees another
        calls.append(1)
        return real if len(calls) == 1 else real + 1

    monkeypatch.setattr(os, "getuid", uid)
    found = scan_waiting()
    assert found.scripts == [] and found.problem is None and len(calls) >= 2


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777])
def test_a_folder_others_may_write_into_lists_nothing_and_says_why(folder, mode):
    os.chmod(folder, mode)  # another user could have put a file there with their address and token
    found = scan_waiting()
    assert found.scripts == [] and list_waiting() == []
    assert "writable by others" in found.problem and f"chmod 700 {folder}" in found.problem
    assert "\n" not in found.problem


def test_a_folder_of_another_user_lists_nothing_and_says_why(folder, monkeypatch):
    monkeypatch.setattr(os, "getuid", lambda: os.stat(folder).st_uid + 1)
    found = scan_waiting()
    assert found.scripts == [] and "belongs to another user" in found.problem


def test_a_linked_folder_lists_nothing_and_says_why(folder, tmp_path, monkeypatch):
    link = tmp_path / "linked"
    link.symlink_to(folder)
    monkeypatch.setenv("WORKBENCH_ATTACH_DIR", str(link))
    found = scan_waiting()
    assert found.scripts == [] and "cannot be read" in found.problem
