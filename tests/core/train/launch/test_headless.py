"""Headless ``workbench train run.toml``: in process and as a subprocess."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workbench.core.train.config import DataConfig, ModelConfig, TrainConfig
from workbench.core.train.launch.headless import train_from_toml

ROOT = Path(__file__).resolve().parents[4]


def write_config(tmp_path, name="run.toml", **kw) -> Path:
    data = kw.pop("data", DataConfig(batch_size=128))
    cfg = TrainConfig(data=data, epochs=kw.pop("epochs", 2), lr=1e-2, run_dir=str(tmp_path / "out"), **kw)
    path = tmp_path / name
    cfg.to_toml(path)
    return path


def test_train_from_toml_writes_run_folder(tmp_path):
    path = write_config(tmp_path, model=ModelConfig(arch="digits_cnn", frozen=["features.0.weight"]))
    lines: list[str] = []
    assert train_from_toml(path, out=lines.append) == 0, lines
    epoch_lines = [ln for ln in lines if ln.startswith("epoch ")]
    assert len(epoch_lines) == 2
    assert "val_acc" in epoch_lines[-1] and "samples/s" in epoch_lines[-1] and "train_loss" in epoch_lines[-1]
    out = tmp_path / "out"
    assert {"run.toml", "init.pt", "metrics.csv", "last.pt", "best.pt"} <= {p.name for p in out.iterdir()}
    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["epoch"] for r in rows] == ["0", "1"]
    assert float(rows[-1]["val_acc"]) > 0.5
    ck = torch.load(out / "best.pt", weights_only=True)
    assert ck["arch"]["name"] == "digits_cnn" and "features.0.weight" in ck["frozen"]
    # run.toml holds every setting: replaying it gives the same config (bar the run folder)
    replay = TrainConfig.from_toml(out / "run.toml")
    original = TrainConfig.from_toml(path)
    original.run_dir = None
    original.model.init = "init.pt"  # the run records the weights it started from
    assert replay == original


def test_start_from_checkpoint_and_resume(tmp_path):
    first = write_config(tmp_path, "first.toml", epochs=1)
    assert train_from_toml(first, out=lambda s: None) == 0
    last = tmp_path / "out" / "last.pt"
    cfg = TrainConfig.from_toml(first)
    cfg.epochs, cfg.run_dir = 2, str(tmp_path / "resumed")
    cfg.model = ModelConfig(arch="", checkpoint=str(last), resume=True)
    cfg.to_toml(tmp_path / "resume.toml")
    lines: list[str] = []
    assert train_from_toml(tmp_path / "resume.toml", out=lines.append) == 0, lines
    epochs = [ln for ln in lines if ln.startswith("epoch ")]
    assert len(epochs) == 1 and epochs[0].startswith("epoch 2/2")
    assert torch.load(tmp_path / "resumed" / "last.pt", weights_only=True)["epoch"] == 2


def test_errors_give_exit_code_1_and_a_message(tmp_path):
    lines: list[str] = []
    assert train_from_toml(tmp_path / "missing.toml", out=lines.append) == 1
    assert "missing.toml" in lines[-1]
    bad = tmp_path / "bad.toml"
    bad.write_text('optimizer = "lbfgs"\n')
    assert train_from_toml(bad, out=lines.append) == 1
    assert "optimizer" in lines[-1] and "lbfgs" in lines[-1]
    nodata = write_config(tmp_path, "nodata.toml", data=DataConfig(dataset="cifar10", root=str(tmp_path / "c10")))
    lines.clear()
    assert train_from_toml(nodata, out=lines.append) == 1
    assert any("c10" in ln and "Download" in ln for ln in lines)


def test_subprocess_workbench_train(tmp_path):
    path = write_config(tmp_path, epochs=1)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WORKBENCH_DATA_DIR": str(tmp_path / "data")}
    proc = subprocess.run([sys.executable, "-m", "workbench", "train", str(path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "epoch 1/1" in proc.stdout
    assert "PySide6" not in proc.stderr
    assert (tmp_path / "out" / "last.pt").exists()


@pytest.mark.parametrize("line,expected", [
    ('lr = "fast"', "lr = 'fast' in top level: expected a number"),
    ("epochs = 2.5", "epochs = 2.5 in top level: expected a whole number"),
    ('optimizer = "adamm"', "optimizer = 'adamm' is not one of sgd, adam, adamw, rmsprop"),
])
def test_a_bad_setting_names_the_file_the_key_and_what_it_takes(tmp_path, line, expected):
    path = tmp_path / "run.toml"
    path.write_text(line + "\n", encoding="utf-8")
    lines: list[str] = []
    assert train_from_toml(path, out=lines.append) == 1
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: {expected}")


def test_a_toml_syntax_error_names_the_file_once(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("lr = \n", encoding="utf-8")
    lines: list[str] = []
    assert train_from_toml(path, out=lines.append) == 1
    assert len(lines) == 1 and lines[0].count(str(path)) == 1


def test_an_unavailable_device_is_one_line(tmp_path):
    path = write_config(tmp_path, device="cuda:99")
    lines: list[str] = []
    assert train_from_toml(path, out=lines.append) == 1
    assert len(lines) == 1 and "device = 'cuda:99' is not available here; available: cpu" in lines[0].split(", cuda")[0]
    assert not (tmp_path / "out").exists()
