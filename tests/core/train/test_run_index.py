"""``workbench runs``: one line per run folder with its model, dataset, epochs, best metrics and state."""

from __future__ import annotations

import json
import math
import subprocess
import sys

from workbench.core.model.demo import DigitsCNN
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.hooks import Callback
from workbench.core.train.loop import Trainer
from workbench.core.train.run_index import list_runs


class StopAt(Callback):
    def on_step_end(self, trainer, metrics):
        if metrics["step"] == 30:
            trainer.request_stop()


def _run(root, name, epochs, callbacks=()):
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=64), epochs=epochs, lr=1e-3,
                      run_dir=str(root / name), tensorboard=False)
    return Trainer(DigitsCNN(), cfg, list(callbacks)).fit()


def test_runs_are_listed_with_their_state_and_best_metrics(tmp_path):
    root = tmp_path / "runs"
    assert _run(root, "a-finished", 2) == "completed"
    assert _run(root, "b-stopped", 3, [StopAt()]) == "stopped"
    assert _run(root, "c-crashed", 1) == "completed"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    status = json.loads((root / "c-crashed" / "status.json").read_text())
    (root / "c-crashed" / "status.json").write_text(json.dumps({**status, "state": "running", "reason": None,
                                                                "pid": int(dead.stdout)}))
    (root / "not-a-run").mkdir()

    runs = list_runs(root)
    assert [(r.name, r.state, r.epochs_done, r.epochs) for r in runs] == [
        ("a-finished", "finished", 2, 2), ("b-stopped", "stopped", 1, 3), ("c-crashed", "crashed", 1, 1)]
    a = runs[0]
    assert a.model == "digits_cnn" and a.dataset == "digits" and 0 < a.best_val_loss < 3 and 0 < a.best_val_acc <= 1
    assert runs[0].started <= runs[1].started <= runs[2].started

    out = subprocess.run([sys.executable, "-m", "workbench", "runs", str(root)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].split()[:3] == ["name", "started", "model"] and len(lines) == 4
    assert lines[1].startswith("a-finished") and lines[1].rstrip().endswith("finished")
    assert lines[3].rstrip().endswith("crashed")
    js = json.loads(subprocess.run([sys.executable, "-m", "workbench", "runs", str(root), "--json"],
                                   capture_output=True, text=True, timeout=120).stdout)
    assert [r["state"] for r in js] == ["finished", "stopped", "crashed"]
    assert math.isclose(js[0]["best_val_loss"], a.best_val_loss)
    missing = subprocess.run([sys.executable, "-m", "workbench", "runs", str(tmp_path / "nope")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and "no such runs folder" in missing.stderr
