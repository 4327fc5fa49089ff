"""The runs of a host read in one command: the generated script runs here, in a folder standing for the remote
home, with a ``squeue`` that prints what the test says (the real host and cluster are in tests/remote)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from workbench.core.remote import jobs, slurm
from workbench.core.remote.listing import probe
from workbench.core.remote.ssh import RemoteError, Ssh


class LocalSsh(Ssh):
    """Runs the remote command line with ``sh`` here, in ``home``."""

    def __init__(self, home, path):
        super().__init__(None)
        object.__setattr__(self, "home", home)
        object.__setattr__(self, "path", path)

    def run(self, host, script, *, what, timeout=60):
        done = subprocess.run(["/bin/sh", "-c", script], cwd=self.home, capture_output=True, text=True,
                              env={**os.environ, "PATH": self.path}, timeout=timeout)
        if done.returncode:
            raise self.error(host, what, done.returncode, done.stderr)
        return done.stdout


def _run(root, name, status=None, **files):
    folder = root / name
    (folder / "run").mkdir(parents=True)
    (folder / "run.toml").write_text("epochs = 1\n")
    if status is not None:
        (folder / "run" / "status.json").write_text(json.dumps(status, indent=1))  # several lines
    for file, text in files.items():
        (folder / file).write_text(text)
    return folder


@pytest.fixture
def live_pid():
    proc = subprocess.Popen(["workbench-stand-in", "30"], executable="sleep")  # a live process named so
    yield proc.pid
    proc.kill()
    proc.wait()


def test_every_run_s_state_in_one_command(tmp_path, live_pid):
    home, bin_dir = tmp_path / "home", tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text("#!/bin/sh\nprintf '7 PENDING\\n9 RUNNING\\n'\n")
    (bin_dir / "squeue").chmod(0o755)
    root = home / "runs"
    odd = "it's a; run $(touch pwned)"
    _run(root, odd, {"state": "running", "reason": None}, pid=f"{live_pid}\n")
    _run(root, "done", {"state": "finished", "reason": "completed"}, pid="999999999\n")
    _run(root, "waits", None, job="7\n")
    _run(root, "on nodes", {"state": "running"}, job="9;cluster\n")
    _run(root, "cancelled", {"state": "stopped", "reason": "stopped"}, job="8\n", cancelled="")
    _run(root, "bad pid", {"state": "running"}, pid="1; rm -rf ~\n")
    (root / "not a run").mkdir()
    ssh = LocalSsh(home, f"{bin_dir}:/usr/bin:/bin")
    found = {p.name: p for p in probe(ssh, "h", "~/runs")}
    assert set(found) == {odd, "done", "waits", "on nodes", "cancelled", "bad pid"}
    assert {n: p.state for n, p in found.items()} == {
        odd: "running", "done": "completed", "waits": "queued", "on nodes": "running", "cancelled": "cancelled",
        "bad pid": "crashed"}
    assert found[odd].pid == live_pid and found[odd].alive and found[odd].folder == f"{root}/{odd}"
    assert found["on nodes"].job == "9" and found["on nodes"].squeue == "RUNNING"
    assert found["bad pid"].pid is None
    assert not list(tmp_path.rglob("pwned"))
    [one] = probe(ssh, "h", "~/runs", odd)
    assert one == found[odd]
    with pytest.raises(RemoteError, match="no run 'nope'"):
        probe(ssh, "h", "~/runs", "nope")
    assert probe(ssh, "h", "~/no-runs-yet") == []


def test_a_job_squeue_no_longer_lists_goes_by_its_run_folder(tmp_path):
    home, bin_dir = tmp_path / "home", tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text("#!/bin/sh\nexit 0\n")  # the cluster forgot the job (MinJobAge)
    (bin_dir / "squeue").chmod(0o755)
    _run(home / jobs.home_relative(jobs.DEFAULT_REMOTE_DIR), "x", {"state": "finished", "reason": "completed"},
         **{slurm.JOB_FILE: "5\n"})
    [p] = probe(LocalSsh(home, f"{bin_dir}:/usr/bin:/bin"), "h")
    assert p.squeue is None and p.job == "5" and p.state == "completed"
