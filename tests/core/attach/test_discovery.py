"""The files by which a window finds the scripts waiting on this machine (``workbench.core.attach.discovery``)."""

from __future__ import annotations

import os
import stat

from workbench.core.attach.discovery import discovery_dir, list_waiting, remove_discovery, write_discovery


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
