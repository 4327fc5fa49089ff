"""Freezing, staged unfreezing, probes, the LR finder, the NaN trace and data parallelism on a user's task.

The text example of the README (a user Dataset of token-id dicts, an
``nn.Embedding`` model and a ``training_step``): each tool acts on the model and
on what the step returns, not on an ``(input, target)`` batch.
"""

from __future__ import annotations

import importlib.util
import math
import shutil
from pathlib import Path

import torch

from workbench.cli import main as cli_main
from workbench.core.probe.callback import ProbeCallback
from workbench.core.train.config import DataConfig, ModelConfig, TaskConfig, TrainConfig
from workbench.core.train.lr_finder import lr_find
from workbench.core.train.trainer.loop import Trainer

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "text"


def _module(folder: Path):
    spec = importlib.util.spec_from_file_location("text_task_under_test", folder / "text_task.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _config(folder: Path, run: str, **kw) -> TrainConfig:
    return TrainConfig(data=DataConfig(dataset=f"{folder}/text_task.py:make_dataset", batch_size=32, num_workers=0,
                                       kwargs={"n": 400}),
                       task=TaskConfig(step=f"{folder}/text_task.py:training_step"), lr=0.01,
                       run_dir=str(folder / run), tensorboard=False, **kw)


def test_freeze_unfreeze_probes_and_lr_finder_on_a_user_step(tmp_path):
    folder = tmp_path / "text"
    shutil.copytree(EXAMPLE, folder)
    model = _module(folder).TinyTextClassifier()

    found = lr_find(Trainer(model, _config(folder, "lr")), steps=20)
    assert len(found.losses) >= 10 and all(math.isfinite(v) for v in found.losses)

    embed_before = model.embed.weight.detach().clone()
    reports: list = []
    probes = ProbeCallback(reports.extend, every=5, probed=["embed", "head"], flush_ms=0)
    cfg = _config(folder, "run", epochs=3, model=ModelConfig(frozen=["embed.weight"]),
                  unfreeze=[{"epoch": 3, "module": "embed"}])
    tr = Trainer(model, cfg, [probes])
    assert tr.fit() == "completed", tr.error
    assert tr.kind == "classification" and type(tr.task).__name__ == "StepTask"
    # frozen for epochs 1-2, unfrozen before epoch 3: changed only by epoch 3's steps
    assert model.embed.weight.requires_grad and not torch.equal(model.embed.weight, embed_before)
    measured = [r for r in reports if r.activations]
    assert {"embed", "head"} <= set(measured[0].activations)
    grads = [r.grads for r in reports if r.grads is not None]
    first_epoch = [g for g in grads if g.step <= 13]
    assert first_epoch and all(g.own.get("embed.weight", 0.0) == 0.0 for g in first_epoch)  # frozen: no gradient


def test_a_nan_from_a_user_step_is_traced_to_its_module(tmp_path):
    folder = tmp_path / "text"
    shutil.copytree(EXAMPLE, folder)
    module = _module(folder)
    model = module.TinyTextClassifier()
    with torch.no_grad():
        model.head.weight[0, 0] = math.nan  # the head makes the first non-finite value
    tr = Trainer(model, _config(folder, "nan", epochs=1))
    assert tr.fit() == "nonfinite"
    assert tr.nonfinite_trace is not None and tr.nonfinite_trace.module == "head"


def test_two_data_parallel_ranks_train_a_user_step(tmp_path, capfd):
    folder = tmp_path / "text"
    shutil.copytree(EXAMPLE, folder)
    run_toml = folder / "run.toml"
    run_toml.write_text(run_toml.read_text().replace("epochs = 5", "epochs = 2"))
    assert cli_main(["train", str(run_toml), "--trust", "--nproc-per-node", "2"]) == 0
    out = capfd.readouterr().out
    assert "all 2 ranks end with identical weights" in out
    assert "epoch 2/2  step 76" in out  # 1,200 sequences in global batches of 32: 38 steps an epoch
