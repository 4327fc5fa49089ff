"""The commands sent to a host: names are data, the launch line detaches, remote folders are home-relative.

Runs against a real host are in tests/remote/test_remote_runs.py; these run the generated shell lines locally.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from workbench.core.remote import jobs
from workbench.core.remote.ssh import RemoteError


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "-rf", "line\nbreak"])
def test_a_name_that_is_not_one_folder_is_refused(bad):
    with pytest.raises(RemoteError, match="give a folder name"):
        jobs.check_name(bad)


def test_remote_folder_quotes_nothing_itself_and_is_home_relative():
    assert jobs.remote_folder("~/workbench-runs", "it's; a run") == "workbench-runs/it's; a run"
    assert jobs.remote_folder("/scratch/", "x") == "/scratch/x"


def test_default_name_is_the_folder_and_the_time(tmp_path):
    (tmp_path / "mnist").mkdir()
    name = jobs.default_name(tmp_path / "mnist" / "run.toml")
    assert name.startswith("mnist-") and jobs.check_name(name) == name
    assert jobs.default_name(tmp_path / "sweep.toml").startswith("sweep-")


@pytest.mark.parametrize("shell", ["sh", "bash"])  # a login shell runs it as given (bash keeps a subshell)
def test_the_launch_line_starts_a_detached_session_and_prints_its_pid(tmp_path, shell):
    """Run locally with a stand-in ``workbench`` on the PATH: the pid printed is the pid file's, in its own session
    (not a subshell's that a hang-up would end), with its private discovery folder."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "workbench"
    fake.write_text("#!/bin/sh\necho \"args: $*\"; ps -o sid= -p $$; echo \"attach: $WORKBENCH_ATTACH_DIR\"; "
                    "exec sleep 30\n")
    fake.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    out = subprocess.run([shell, "-c", jobs.launch_line(trust=True)], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=30)
    pid = int(out.stdout.strip())
    try:
        assert (tmp_path / jobs.PID_FILE).read_text().strip() == str(pid)
        log = tmp_path / jobs.LOG_FILE
        deadline = time.monotonic() + 10
        while log.read_text().count("\n") < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        args, sid, attach = log.read_text().splitlines()[:3]
        assert args == "args: train run.toml --trust" and int(sid) == pid  # a session of its own
        assert attach == f"attach: {tmp_path / jobs.ATTACH_SUBDIR}"
        assert (tmp_path / jobs.ATTACH_SUBDIR).stat().st_mode & 0o777 == 0o700
    finally:
        subprocess.run(["kill", str(pid)], check=False)


def test_without_workbench_on_the_path_the_launch_line_says_so(tmp_path):
    out = subprocess.run(["sh", "-c", jobs.launch_line()], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 127 and "workbench is not on the PATH of the host" in out.stderr
