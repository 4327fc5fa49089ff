"""Start with a model trained in this window asks: from the trained weights, or from the file as opened again.

Before, the window kept the trained weights and a clean second run meant opening
the file again (the Partial-load question again, the freeze forgotten). The
answer also decides the run's lineage: run.toml's ``[model] source``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import torch

from tests.ui.helpers import panel_host
from workbench.core.model.demo import DigitsCNN
from workbench.core.model.formats import read_checkpoint

RUN_TIMEOUT_MS = 60_000

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


@pytest.fixture
def opened(qtbot, tmp_path, request):
    """The demo opened from a saved state_dict, ``features.0`` frozen, trained 1 epoch (on a thread / in a process)."""
    torch.manual_seed(0)
    path = tmp_path / "digits.pt"
    torch.save(DigitsCNN().state_dict(), path)
    ckpt = read_checkpoint(path)
    model = DigitsCNN()
    model.load_state_dict(ckpt.state_dict)
    model.features[0].requires_grad_(False)
    win = panel_host(model, checkpoint=ckpt, input_shape=(1, 1, 8, 8))
    qtbot.addWidget(win)
    panel = win.panel
    panel.set_in_process(request.param == "thread", remember=False)
    panel.settings.epochs_spin.setValue(1)
    seen = []  # (source, features.3.weight, features.0 frozen) as each run is made, before any step
    make_run = panel.run.make_run

    def spy(model, config, **kwargs):
        seen.append((config.model.source, model.features[3].weight.detach().clone(),
                     not model.features[0].weight.requires_grad))
        return make_run(model, config, **kwargs)

    panel.run.make_run = spy
    win.seen, win.path, win.said = seen, path, []
    win.session.statusMessage.connect(lambda text, ms: win.said.append(text))
    _run(qtbot, panel, tmp_path / "run1")
    assert win.prompts.count("start_from") == 0  # nothing trained yet: nothing to ask
    assert not torch.equal(model.features[3].weight, ckpt.state_dict["features.3.weight"])
    yield win
    if panel.is_running():
        panel.shutdown(ask=False)


def _run(qtbot, panel, run_dir: Path) -> None:
    panel.settings.run_dir_edit.setText(str(run_dir))
    assert panel.start()
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=RUN_TIMEOUT_MS)
    assert panel.last_reason() == "completed" and panel.errors == []


def _source(run_dir: Path) -> str:
    return tomllib.loads((run_dir / "run.toml").read_text())["model"]["source"]


@pytest.mark.parametrize("opened", ["thread", "process"], indirect=True)  # a process syncs its weights back
def test_start_from_the_file_as_opened_restores_its_weights_and_keeps_the_freeze(opened, qtbot, tmp_path):
    panel, prompts = opened.panel, opened.prompts
    prompts.answers["start_from"] = "file"
    _run(qtbot, panel, tmp_path / "run2")
    assert prompts.asked[-1] == ("start_from", "run1", str(opened.path))
    source, weight, frozen = opened.seen[-1]
    assert torch.equal(weight, torch.load(opened.path)["features.3.weight"])  # before the second run's first step
    assert frozen  # the freeze made before the first run holds
    assert source == _source(tmp_path / "run2") == str(opened.path.resolve())
    assert any(text.startswith("Restored the weights of digits.pt;") for text in opened.said)


@pytest.mark.parametrize("opened", ["thread"], indirect=True)
def test_start_from_the_trained_weights_names_the_last_run_and_cancel_starts_nothing(opened, qtbot, tmp_path):
    panel, prompts = opened.panel, opened.prompts
    trained = panel.session.model.features[3].weight.detach().clone()
    prompts.answers["start_from"] = None
    assert not panel.start() and not panel.is_running()
    assert len(opened.seen) == 1  # Cancel: no run made
    prompts.answers["start_from"] = "trained"
    _run(qtbot, panel, tmp_path / "run2")
    source, weight, frozen = opened.seen[-1]
    assert torch.equal(weight, trained) and frozen
    assert source == _source(tmp_path / "run2") == str((tmp_path / "run1" / "last.pt").resolve())
