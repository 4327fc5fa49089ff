"""Opening a file keeps its word: one answer asks nothing, a weights-only tree cannot be trained,
NaN weights are named on open, and a file from the command line asks over a painted window.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torchvision
from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QApplication

from workbench.core.model.spec import ArchSpec
from workbench.ui.dialogs import WEIGHTS_ONLY
from workbench.ui.model.tree_model import COL_NAME


@pytest.fixture(scope="module")
def resnet18_file(tmp_path_factory) -> Path:
    """A bare resnet18 state_dict: resnet18 alone matches every key and shape."""
    path = tmp_path_factory.mktemp("ckpt") / "r18.pt"
    torch.save(torchvision.models.resnet18().state_dict(), path)
    return path


def _status(window) -> str:
    return window.statusBar().currentMessage()


def _change_architecture(window) -> None:
    """Edit > Change architecture…, as a click on the menu entry does."""
    action = window.findChild(object, "changeArchitectureAction")
    edit_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Edit")
    assert action in edit_menu.actions() and action.isEnabled()
    action.trigger()


def test_a_unique_full_match_opens_directly_and_edit_change_architecture_asks(window, resnet18_file):
    """The dialog asked although resnet18 was the one architecture matching every key and shape."""
    assert window.open_path(resnet18_file)
    assert window.prompts.count("architecture") == 0
    assert window.arch_spec == ArchSpec("resnet18") and type(window.model).__name__ == "ResNet"
    assert window.status_file.text() == "r18.pt · state_dict · resnet18 (detected)"
    assert "Opened as resnet18" in _status(window) and "Change architecture" in _status(window)

    # another choice: the dialog asks, naming the file; here the weights-only tree
    window.prompts.answers["architecture"] = WEIGHTS_ONLY
    _change_architecture(window)
    asked = [a for a in window.prompts.asked if a[0] == "architecture"]
    assert len(asked) == 1 and asked[0][2] == "r18.pt" and asked[0][1][0].spec.name == "resnet18"
    assert window.arch_spec is None and window.checkpoint.path == resnet18_file
    assert "(detected)" not in window.status_file.text()

    window.prompts.answers["architecture"] = None  # cancel: the model shown stays
    before = window.model
    _change_architecture(window)
    assert window.model is before and not window.errors

    window.prompts.answers["architecture"] = ArchSpec("resnet18")
    _change_architecture(window)
    assert type(window.model).__name__ == "ResNet" and window.arch_spec == ArchSpec("resnet18")


def test_change_architecture_is_off_for_the_demo(window):
    action = window.findChild(object, "changeArchitectureAction")
    assert action.text() == "Change &architecture…" and not action.isEnabled()


def test_start_and_find_lr_are_disabled_on_a_weights_only_tree_with_the_reason(window, resnet18_file, qtbot):
    """Pressing Start said "The model keeps the weights of the last completed step" although no step ran."""
    panel = window.training_panel
    assert panel.start_button.isEnabled() and panel.lr_find_button.isEnabled()  # the demo trains
    assert window.open_path(resnet18_file)
    window.prompts.answers["architecture"] = WEIGHTS_ONLY
    _change_architecture(window)
    assert window.arch_spec is None
    for button in (panel.start_button, panel.lr_find_button):
        assert not button.isEnabled()
        assert "weights-only tree" in button.toolTip() and "Change architecture" in button.toolTip()
    qtbot.mouseClick(panel.start_button, Qt.MouseButton.LeftButton)
    qtbot.keyClick(panel.start_button, Qt.Key.Key_F5)
    assert not panel.start() and not panel.is_running() and window.errors == []
    assert "weights-only tree" in _status(window)
    # an architecture makes it trainable again, and the tooltip is the plain one
    window.prompts.answers["architecture"] = ArchSpec("resnet18")
    _change_architecture(window)
    assert panel.start_button.isEnabled() and panel.lr_find_button.isEnabled()
    assert "weights-only" not in panel.start_button.toolTip()


def test_nonfinite_weights_are_badged_in_the_tree_and_named_in_the_status_bar_on_open(window, tmp_path):
    """A file with NaN weights opened without a word; badges came only after a probe batch."""
    sd = torchvision.models.resnet18().state_dict()
    sd["layer1.0.conv1.weight"][0, 0, 0, 0] = float("nan")
    sd["fc.weight"][:] = float("nan")
    sd["fc.bias"][3] = float("inf")
    path = tmp_path / "diverged.pt"
    torch.save(sd, path)
    assert window.open_path(path)
    assert _status(window).startswith("3 tensors hold NaN/Inf: layer1.0.conv1.weight, fc.weight, fc.bias")
    tree = window.tree_model
    kinds = {name: [b.kind for b in tree.badges(name)] for name in ("layer1.0.conv1", "fc", "layer1.0.conv2")}
    assert kinds == {"layer1.0.conv1": ["nonfinite"], "fc": ["nonfinite", "nonfinite"], "layer1.0.conv2": []}
    fc_badges = tree.badges("fc")
    assert fc_badges[0].value == 1.0 and "512,000 of 512,000" in fc_badges[0].text
    icon = tree.index_for_name("layer1.0.conv1", COL_NAME).data(Qt.ItemDataRole.DecorationRole)
    assert icon is not None and not icon.isNull()
    window.session.set_badges({})  # a probe measurement that finds nothing (it used to drop the open-time badges)
    assert [b.kind for b in tree.badges("fc")] == ["nonfinite", "nonfinite"]
    # a clean file clears them
    clean = tmp_path / "clean.pt"
    torch.save(torchvision.models.resnet18().state_dict(), clean)
    assert window.open_path(clean)
    assert tree.badges("fc") == [] and "NaN" not in _status(window)


class _PaintCounter(QObject):
    def __init__(self):
        super().__init__()
        self.paints = 0

    def eventFilter(self, obj, event):  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.Paint:
            self.paints += 1
        return False


def test_a_file_from_the_command_line_asks_over_the_painted_window(qtbot, tmp_path):
    """``workbench FILE``: the Architecture dialog came up before the window was painted (a black screen)."""
    from tests.ui.helpers import RecordingPrompts
    from workbench.ui.app import build_parser, show_and_open
    from workbench.ui.main_window import MainWindow

    sd = torchvision.models.resnet18().state_dict()
    del sd["fc.bias"]  # no full match: the dialog asks
    path = tmp_path / "ask.pt"
    torch.save(sd, path)
    seen = []
    win = MainWindow(prompts=RecordingPrompts())
    qtbot.addWidget(win)
    counter = _PaintCounter()
    win.installEventFilter(counter)
    win.prompts.answers["architecture"] = lambda candidates, name: seen.append(
        (win.isVisible(), win.windowHandle() is not None and win.windowHandle().isExposed(), counter.paints)
    ) or WEIGHTS_ONLY
    args = build_parser().parse_args([str(path), "--select", "layer1"])
    show_and_open(win, args)
    assert seen == []  # nothing asked before the event loop ran (and painted)
    qtbot.waitUntil(lambda: win.checkpoint is not None, timeout=30_000)
    assert len(seen) == 1
    visible, exposed, paints = seen[0]
    assert visible and exposed and paints >= 1
    assert win.tree_widget.current_node().name == "layer1"  # --select applied after the open
    QApplication.processEvents()
