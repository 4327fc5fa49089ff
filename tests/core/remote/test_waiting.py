"""Reading a host's discovery files: the remote script run here by ``sh`` on a folder of our own (what it skips),
and the parsing of what it prints. Over a real ssh: tests/remote/test_attach_remote.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from workbench.core.remote import waiting


def _write(folder, pid, port, **fields):
    info = {"address": f"127.0.0.1:{port}", "token": "t0k", "pid": pid, "port": port, "name": "run",
            "run_dir": "run", "started": 1.0, **fields}
    path = folder / f"{pid}-{port}.json"
    path.write_text(json.dumps(info, indent=1))
    return path


def test_only_live_processes_own_regular_files_are_read_with_a_relative_run_dir_made_absolute(tmp_path):
    folder = tmp_path / "attach"
    folder.mkdir(mode=0o700)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=tmp_path)
    try:
        _write(folder, live.pid, 4000, started=2.0)
        _write(folder, 2**22 + 7, 4001)  # a pid no process has
        os.symlink(_write(tmp_path, live.pid, 4002), folder / f"{live.pid}-4002.json")  # a link is never followed
        (folder / f"{live.pid}-4003.json").write_text("{" * 100_000)  # over the size limit
        out = subprocess.run(["sh", "-c", waiting._script()], capture_output=True, text=True, check=True,
                             env={**os.environ, "WORKBENCH_ATTACH_DIR": str(folder),  # only this folder:
                                  "XDG_RUNTIME_DIR": str(tmp_path / "none"), "TMPDIR": str(tmp_path / "none")}
                             ).stdout
    finally:
        live.kill()
        live.wait()
    found = waiting._parse_all(out)
    assert [(w["pid"], w["port"]) for w in found] == [(live.pid, 4000)]
    assert found[0]["run_dir"] == str(tmp_path / "run") and found[0]["token"] == "t0k"


def test_a_detached_runs_own_attach_folder_under_the_runs_folder_is_read(tmp_path):
    run = tmp_path / "runs" / "a b;c" / ".attach"  # a run name is data
    run.mkdir(parents=True, mode=0o700)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=run.parent)
    try:
        _write(run, live.pid, 4010)
        env = {**os.environ, "HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(tmp_path / "none"),
               "TMPDIR": str(tmp_path / "none"), "WORKBENCH_ATTACH_DIR": ""}
        script = waiting._script("~/runs")
        out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True, env=env,
                             cwd=tmp_path).stdout
        without = subprocess.run(["sh", "-c", waiting._script()], capture_output=True, text=True, check=True,
                                 env=env, cwd=tmp_path).stdout
    finally:
        live.kill()
        live.wait()
    assert [(w["pid"], w["port"], w["run_dir"]) for w in waiting._parse_all(out)] == [
        (live.pid, 4010, str(run.parent / "run"))]
    assert waiting._parse_all(without) == []


def test_bad_fields_are_skipped_and_a_run_is_found_by_its_folder():
    mark = "--workbench-discovery--\n"
    good = json.dumps({"token": "a", "pid": 5, "port": 6, "run_dir": "/h/me/runs/x/run", "started": 3})
    bad = json.dumps({"token": "a", "pid": "5", "port": 6})  # a pid that is not a number
    out = f"{mark}/h\n{good}\n{mark}/h\n{bad}\n{mark}/h\n{good}\n"
    found = waiting._parse_all(out)
    assert len(found) == 1  # the same process listed by two folders counts once
    assert waiting.find_run(found, "/h/me/runs/x/run", "x") is found[0]
    assert waiting.find_run(found, "/home/me/runs/x/run", "x") is found[0]  # the home folder spelled otherwise
    assert waiting.find_run(found, "/h/me/runs/y/run", "y") is None
