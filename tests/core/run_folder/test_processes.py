"""Whether a recorded pid is a live Workbench training process (``workbench.core.run_folder.processes``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import (SAY_READY, program_sleeper, python_sleeper, ready_then_sleep, started,
                             workbench_module_child)
from workbench.core.run_folder.processes import is_training_process, process_start_time, training_pid


needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="checks /proc (Linux)")


def test_pid_zero_minus_one_and_the_wrong_types_are_never_a_training_process():
    for pid in (0, -1, -os.getpid(), None, "1", True, 1.5):
        assert not is_training_process(pid)


def _console_script_child(folder):
    """A live process started as the ``workbench`` console script is (``python .../bin/workbench ARGS``)."""
    script = folder / "bin" / "workbench"
    script.parent.mkdir(exist_ok=True)
    script.write_text(f"{SAY_READY}\nimport time\ntime.sleep(60)\n")
    return started([sys.executable, str(script), "train", "run.toml"])


_SPAWN_GRANDCHILD = """
import multiprocessing, sys
from tests.processes import ready_then_sleep
if __name__ == "__main__":
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    p = ctx.Process(target=ready_then_sleep, args=(ready, 60), daemon=True)
    p.start()
    assert ready.wait(60)
    print(p.pid, flush=True)
    sys.stdin.read()
"""


def _stop(*procs):
    for p in procs:
        p.kill()
        p.wait()


@needs_proc
def test_a_live_process_counts_only_if_it_is_workbench_and_started_when_recorded(tmp_path):
    me = os.getpid()
    assert is_training_process(me, process_start_time(me)) and is_training_process(me)  # this process runs Workbench
    assert not is_training_process(me, process_start_time(me) + 1)  # the pid was reused
    sleeper, python = program_sleeper(), python_sleeper()
    module, script = workbench_module_child(), _console_script_child(tmp_path)
    try:
        for p in (sleeper, python):  # alive, but not Workbench: with or without its start time
            assert process_start_time(p.pid) is not None
            assert not is_training_process(p.pid) and not is_training_process(p.pid, process_start_time(p.pid))
        for p in (module, script):
            assert is_training_process(p.pid) and is_training_process(p.pid, process_start_time(p.pid))
            assert not is_training_process(p.pid, process_start_time(p.pid) + 1)
    finally:
        _stop(sleeper, python, module, script)
    assert not is_training_process(module.pid) and process_start_time(module.pid) is None


@needs_proc
def test_a_multiprocessing_child_counts_only_when_its_parent_is_workbench(tmp_path):
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    mine = ctx.Process(target=ready_then_sleep, args=(ready, 60), daemon=True)
    mine.start()  # the window's training process is such a child of the window
    assert ready.wait(60)
    root = str(Path(__file__).resolve().parents[2])  # the grandchild's target is tests.processes'
    outer = subprocess.Popen([sys.executable, "-c", _SPAWN_GRANDCHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=root))
    try:
        theirs = int(outer.stdout.readline())  # a spawn child of a plain python, running
        assert process_start_time(theirs) is not None
        assert is_training_process(mine.pid, process_start_time(mine.pid))
        assert not is_training_process(theirs) and not is_training_process(theirs, process_start_time(theirs))
    finally:
        mine.kill()
        mine.join()
        outer.kill()
        outer.wait()


@pytest.mark.parametrize("pid", [2**31, 10**30])
def test_a_pid_beyond_any_process_id_is_no_process(pid):
    assert not is_training_process(pid)


@needs_proc
def test_training_pid_trusts_running_only_for_a_live_workbench_process(tmp_path):
    def status(**fields):
        (tmp_path / "status.json").write_text(json.dumps({"state": "running", **fields}))
        return training_pid(tmp_path)

    me = os.getpid()
    assert status(pid=me, pid_start=process_start_time(me)) == me
    assert status(pid=0) is None and status(pid=-1) is None and status(pid=me, pid_start=1) is None
    python = python_sleeper()
    module = workbench_module_child()
    try:  # a plain python that took a dead run's pid is not trusted; a Workbench process is, with or without start
        assert status(pid=python.pid) is None and status(pid=python.pid, pid_start=None) is None
        assert status(pid=module.pid) == module.pid
        assert status(pid=module.pid, pid_start=process_start_time(module.pid)) == module.pid
    finally:
        _stop(python, module)
    (tmp_path / "status.json").write_text(json.dumps({"state": "finished", "pid": me}))
    assert training_pid(tmp_path) is None
    (tmp_path / "status.json").write_text("{")
    assert training_pid(tmp_path) is None  # unreadable: no evidence of a live run
