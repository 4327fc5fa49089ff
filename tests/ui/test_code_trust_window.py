"""The window's routes to a file that names code: File > Open, the Runs dock's Open and Resume.

Nothing the file names runs before the trust question; Cancel (the default)
leaves the shown model as it was; Trust loads it.
"""

from __future__ import annotations

import pytest
import torch
from PySide6.QtCore import Qt
from torch import nn

from tests.core.model.test_code_trust import Evil
from workbench.core.train.config import TrainConfig

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


@pytest.fixture
def evil(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return Evil(tmp_path)


def test_file_open_asks_before_running_the_files_code(window, evil):
    before = window.session.model
    assert not window.open_path(evil.factory_pt)
    (question,) = [a for a in window.prompts.asked if a[0] == "trust"]
    assert question[1].kind == "code" and question[1].globals == ["evil.py:make"]
    assert evil.nothing_ran() and window.session.model is before and window.errors == []
    window.prompts.answers["trust"] = True
    assert window.open_path(evil.factory_pt)
    assert isinstance(window.session.model, nn.Linear) and evil.called.exists()


def test_the_trust_dialog_names_the_code_and_defaults_to_cancel(qtbot, evil):
    from PySide6.QtWidgets import QMessageBox

    from workbench.core.errors import TrustRequired
    from workbench.ui.dialogs import trust_dialog

    box = trust_dialog(TrustRequired(evil.system_pt, ["os:system"], kind="code"))
    qtbot.addWidget(box)
    assert "os:system" in box.informativeText() and "names Python code" in box.text()
    assert box.defaultButton() is box.button(QMessageBox.StandardButton.Cancel)


def test_runs_dock_open_and_resume_ask_before_running_code(main_window, qtbot, evil, tmp_path):
    window, _panel = main_window
    folder = tmp_path / "runs" / "sent-to-me"
    folder.mkdir(parents=True)
    TrainConfig().to_toml(folder / "run.toml")
    (folder / "evil.py").write_text((evil.root / "src" / "evil.py").read_text())
    torch.save(torch.load(evil.factory_pt, weights_only=True), folder / "last.pt")
    runs = window.runs_panel
    runs.root_edit.setText(str(tmp_path / "runs"))
    runs.refresh()
    runs.select(["sent-to-me"])
    before = window.session.model
    for button in (runs.open_button, runs.resume_button):
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
        assert window.prompts.asked[-1][0] == "trust", window.prompts.asked
        assert evil.nothing_ran() and window.session.model is before
    assert sum(1 for a in window.prompts.asked if a[0] == "trust") == 2


def test_relative_specs_of_a_run_file_start_at_its_folder(qtbot, tmp_path):
    """A run.toml's ``my_task.py:training_step`` is the one beside the run.toml, wherever the window was started."""
    from workbench.core.train.config import TaskConfig, TrainConfig
    from workbench.ui.train.settings_form import TrainingSettings

    (tmp_path / "my_task.py").write_text("def training_step(model, batch):\n    return model(batch[0]).mean()\n")
    form = TrainingSettings()
    qtbot.addWidget(form)
    form.set_config(TrainConfig(task=TaskConfig(step="my_task.py:training_step")), origin=str(tmp_path / "run.toml"))
    cfg = form.config()
    assert cfg.task.step == f"{tmp_path / 'my_task.py'}:training_step"
    assert form.code_to_confirm(cfg) == (str(tmp_path / "run.toml"), [cfg.task.step])
