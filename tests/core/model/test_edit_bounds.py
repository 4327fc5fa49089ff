"""A checkpoint whose recorded edit asks for more than its layer can hold: refused in one line before anything is
allocated (before: a recorded LoRA rank of 20,000,000 on a Linear(64, 10) took 3 GB and was killed on open)."""

from __future__ import annotations

import sys
import time

import pytest
import torch

import peft  # noqa: F401 - in the test extra: a missing extra fails here, never skips

from tests.limited import run_limited
from workbench.core.errors import WorkbenchError
from workbench.core.model import lora, saving
from workbench.core.model.demo import DigitsCNN
from workbench.core.model.edits import MAX_HEAD_WEIGHTS, apply_edits

LYING_RANK = 2 * 10**7


def _saved_with_lora(path, rank: int):
    """A real checkpoint of digits_cnn with LoRA (rank 2) on ``classifier`` (Linear(64, 10)), its recorded rank
    then rewritten to ``rank`` (the digest covers tensors, not the edits: the file still verifies)."""
    model = DigitsCNN()
    lora.add_lora(model, ["classifier"], r=2, alpha=4)
    saving.save_checkpoint(path, saving.checkpoint_payload(
        model, arch="digits_cnn", edits=[lora.lora_edit(["classifier"], 2, 4)], include_rng=False))
    payload = torch.load(path, weights_only=True)
    payload["edits"][0]["r"] = rank
    torch.save(payload, path)
    return path


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS and ru_maxrss in KiB are Linux's")
def test_a_lying_lora_rank_is_refused_on_open_in_bounded_time_and_memory(tmp_path):
    path = _saved_with_lora(tmp_path / "lying.pt", LYING_RANK)
    status, elapsed, peak = run_limited([sys.executable, "-m", "workbench", "inspect", str(path)],
                                        tmp_path / "out.txt")
    output = (tmp_path / "out.txt").read_text()
    assert status == 1, output[-2000:]
    (line,) = output.splitlines()
    assert line.startswith("error: ") and "lying.pt: recorded edit 1 (add_lora)" in line, line
    assert f"rank r = {LYING_RANK:,} is more than classifier (Linear(64, 10)) can use: at most 10" in line, line
    assert elapsed < 60, elapsed  # ~4 s here, the imports
    assert peak < 1.25 * 2**30, peak  # 0.75 GB here; before, A alone asked for 5 GB


def test_the_refusal_names_the_file_and_the_edit_and_a_true_rank_opens(tmp_path):
    path = _saved_with_lora(tmp_path / "lying.pt", LYING_RANK)
    edits = torch.load(path, weights_only=True)["edits"]
    model = DigitsCNN()
    t0 = time.perf_counter()
    with pytest.raises(WorkbenchError) as err:
        apply_edits(model, edits, source=path)
    assert time.perf_counter() - t0 < 1  # nothing allocated, peft never asked
    assert str(err.value).startswith("lying.pt: recorded edit 1 (add_lora): LoRA: rank r = 20,000,000")
    assert lora.lora_paths(model) == []  # the model is untouched
    apply_edits(model, [lora.lora_edit(["classifier"], 10, 4)])  # the bound itself is a rank that works
    assert model.classifier.lora_A["default"].weight.shape == (10, 64)
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3))
    assert lora.max_rank(conv[0]) == 8  # min(3 * 3 * 3, 8)
    with pytest.raises(WorkbenchError, match=r"\[model\] edits, entry 1 \(add_lora\): LoRA: rank r = 9 is more"):
        apply_edits(conv, [lora.lora_edit(["0"], 9, 4)])


def test_a_recorded_head_too_large_is_refused_before_it_is_built(tmp_path):
    model = DigitsCNN()
    t0 = time.perf_counter()
    with pytest.raises(WorkbenchError, match=r"last.pt: recorded edit 1 \(replace_head\): Replace head: "
                                             r"10,000,000,000 outputs on the 64 inputs of classifier"):
        apply_edits(model, [{"op": "replace_head", "path": "classifier", "num_outputs": 10**10}],
                    source=tmp_path / "last.pt")
    assert time.perf_counter() - t0 < 1 and model.classifier.out_features == 10
    assert 10**10 * 64 > MAX_HEAD_WEIGHTS
    apply_edits(model, [{"op": "replace_head", "path": "classifier", "num_outputs": 1000}])
    assert model.classifier.out_features == 1000


def test_a_recorded_edit_is_quoted_short_whatever_it_holds():
    with pytest.raises(WorkbenchError) as err:
        apply_edits(DigitsCNN(), [{"op": "add_lora", "paths": ["x" * 10**6] * 1000, "r": "8" * 10**6}])
    assert len(str(err.value)) < 300 and "(1,000,000 chars)" in str(err.value)
