"""File > Open (and the Runs dock) on a corrupt last.pt: the window names it and offers the intact best.pt."""

from __future__ import annotations

import os

import pytest
import torch

from tests.core.model.checkpoint_damage import flip_tensor_byte
from workbench.core.model.demo import DigitsCNN
from workbench.core.model.saving import checkpoint_payload, save_checkpoint

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


@pytest.fixture
def run_folder(tmp_path):
    folder = tmp_path / "run"
    best, last = DigitsCNN(), DigitsCNN()
    save_checkpoint(folder / "best.pt", checkpoint_payload(best, arch={"name": "digits_cnn", "kwargs": {}}))
    save_checkpoint(folder / "last.pt", checkpoint_payload(last, arch={"name": "digits_cnn", "kwargs": {}}))
    os.utime(folder / "best.pt", (1_000_000_000, 1_000_000_000))  # older than last.pt
    flip_tensor_byte(folder / "last.pt")
    return folder, best


def test_a_corrupt_checkpoint_offers_the_intact_one(window, run_folder):
    folder, best = run_folder
    before = window.session.model
    assert not window.open_path(folder / "last.pt")  # Cancel (the default): nothing opens
    (question,) = [a for a in window.prompts.asked if a[0] == "open_intact"]
    assert question[1].intact.name == "best.pt" and "digest mismatch" in str(question[1])
    assert window.session.model is before and window.errors == []
    window.prompts.answers["open_intact"] = True
    assert window.open_path(folder / "last.pt")
    assert window.session.checkpoint.path.name == "best.pt"
    for name, tensor in best.state_dict().items():
        assert torch.equal(window.session.model.state_dict()[name], tensor), name


def test_without_an_intact_checkpoint_the_error_says_so(window, run_folder):
    folder, _ = run_folder
    flip_tensor_byte(folder / "best.pt")
    assert not window.open_path(folder / "last.pt")
    assert len(window.errors) == 1 and "corrupt" in window.errors[0] and "no intact" in window.errors[0]
    assert not [a for a in window.prompts.asked if a[0] == "open_intact"]
