"""The three worked examples of the README's "Your own task", run as a user runs them: ``workbench train``.

Each runs from its folder's run.toml (copied, so the run folders stay in the
test's own data folder), its validation loss falls, its metrics reach
metrics.csv, and the run.toml the run wrote replays it bit-identically on CPU.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest
import torch

from workbench.core.errors import TrustRequired
from workbench.core.train.launch.headless import check_run_trust, train_from_toml

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"


def _run(path: Path, trust: bool = True) -> tuple[int, list[str]]:
    lines: list[str] = []
    return train_from_toml(path, lines.append, trust=trust), lines


def _run_dir(lines: list[str]) -> Path:
    return Path(next(line for line in lines if line.startswith("run folder: ")).removeprefix("run folder: "))


def _rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def _weights(run_dir: Path) -> dict:
    return torch.load(run_dir / "last.pt", weights_only=True)["model_state_dict"]


def _replays_bit_identically(run_dir: Path) -> None:
    code, lines = _run(run_dir / "run.toml")
    assert code == 0, lines
    again = _weights(_run_dir(lines))
    first = _weights(run_dir)
    assert first.keys() == again.keys()
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not any("changed since the run" in line for line in lines)


@pytest.fixture
def example(tmp_path):
    def copy(name: str) -> Path:
        dst = tmp_path / name
        shutil.copytree(EXAMPLES / name, dst)
        return dst / "run.toml"
    return copy


def test_tabular_regression_from_a_csv_with_no_code(example):
    code, lines = _run(example("tabular"), trust=False)  # names no code: no --trust needed
    assert code == 0, lines
    run_dir = _run_dir(lines)
    rows = _rows(run_dir)
    assert {"val_mae", "val_rmse", "val_r2"} <= set(rows[0])
    assert float(rows[-1]["val_loss"]) < float(rows[0]["val_loss"])
    assert max(float(r["val_r2"]) for r in rows) > 0.4
    best = [r for r in rows if r["best"] == "1"]  # best.pt follows val_r2, mode max
    assert [float(r["val_r2"]) for r in best] == sorted(float(r["val_r2"]) for r in best)
    _replays_bit_identically(run_dir)


def test_text_classifier_with_a_user_dataset_and_training_step(example):
    path = example("text")
    with pytest.raises(TrustRequired):  # it names code: refused without --trust, nothing imported
        check_run_trust(path, trust=False)
    code, lines = _run(path, trust=False)
    assert code == 1 and "--trust" in "\n".join(lines)
    code, lines = _run(path)
    assert code == 0, lines
    run_dir = _run_dir(lines)
    rows = _rows(run_dir)
    assert {"train_acc", "val_acc"} <= set(rows[0])  # the "acc" the step returns, on both splits
    assert float(rows[-1]["val_loss"]) < float(rows[0]["val_loss"])
    assert float(rows[-1]["val_acc"]) > 0.8
    saved = (run_dir / "run.toml").read_text()
    assert str(path.parent / "text_task.py") in saved and "[task.files]" in saved  # by path and content hash
    _replays_bit_identically(run_dir)


def test_a_model_that_returns_its_own_loss(example):
    code, lines = _run(example("own_loss"))
    assert code == 0, lines
    run_dir = _run_dir(lines)
    rows = _rows(run_dir)
    assert float(rows[-1]["val_loss"]) < 0.5 * float(rows[0]["val_loss"])
    _replays_bit_identically(run_dir)


def test_a_replay_says_when_a_user_file_changed(example):
    path = example("text")
    code, lines = _run(path)
    assert code == 0, lines
    task_file = path.parent / "text_task.py"
    task_file.write_text(task_file.read_text() + "\n# edited after the run\n")
    code, lines = _run(_run_dir(lines) / "run.toml")
    assert code == 0
    assert any(f"{task_file} (changed since the run)" in line for line in lines)
