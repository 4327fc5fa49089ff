"""core.train.launch.in_thread: the GUI thread computes single-threaded, worker threads get the cores."""

from __future__ import annotations

import json
import subprocess
import sys

CODE = r"""
import json, os, threading, torch
default = torch.get_num_threads()
from workbench.core.train.launch.in_thread import reserve_cores_for_workers, worker_thread_count, lower_current_thread_priority
saved = reserve_cores_for_workers()
out = {"default": default, "saved": saved, "main_after": torch.get_num_threads(), "worker_count": worker_thread_count()}
def work():
    torch.set_num_threads(worker_thread_count())
    out["thread_set"] = torch.get_num_threads()
    out["lowered"] = lower_current_thread_priority(5)
    out["thread_nice"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
t = threading.Thread(target=work); t.start(); t.join()
out["main_after_worker"] = torch.get_num_threads()
out["main_nice"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
print(json.dumps(out))
"""


def test_reserve_sets_only_the_calling_thread_and_priority_is_per_thread():
    res = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["main_after"] == 1
    assert out["saved"] == out["default"] == out["worker_count"]
    # a worker gets every core back, and that does not undo the GUI thread's setting
    assert out["thread_set"] == out["default"]
    assert out["main_after_worker"] == 1
    if sys.platform.startswith("linux"):
        assert out["lowered"] is True
        assert out["thread_nice"] == out["main_nice"] + 5


def test_a_run_in_the_windows_process_forks_no_dataloader_worker(tmp_path):
    """"auto" loader workers become 0 in a thread run: forking the window's multi-threaded process is unsafe."""
    from pathlib import Path

    from workbench.core.train.config import DataConfig, TrainConfig
    from workbench.core.train.launch.in_thread import ThreadRun

    examples = Path(__file__).resolve().parents[4] / "examples" / "own_loss"
    module = {}
    exec((examples / "hf_style.py").read_text(), module)
    cfg = TrainConfig(data=DataConfig(dataset=f"{examples}/hf_style.py:make_dataset", kwargs={"n": 64}),
                      epochs=1, run_dir=str(tmp_path / "run"), tensorboard=False)
    cfg.task.kind = "model_loss"
    assert cfg.data.num_workers == "auto"
    events = []
    run = ThreadRun(module["TinyTagger"](), cfg)
    assert run.run(events.append) == "completed"
    assert run.trainer.train_loader.settings.num_workers == 0 and cfg.data.num_workers == 0
