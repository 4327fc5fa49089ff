"""The window lists an installed package's architecture (entry point ``tiny_mlp``) and builds it by name.

The real :class:`~workbench.ui.prompts.Prompts` build the real dialogs from
``list_architectures()``; only ``exec()`` is replaced, by a user who searches
for ``tiny_mlp`` and presses OK.
"""

from __future__ import annotations

import pytest
import torch
from PySide6.QtWidgets import QDialog

from workbench.core.model.spec import ArchSpec
from workbench.ui import dialogs
from workbench.ui.main_window import MainWindow
from workbench.ui.prompts import Prompts

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads", "example_plugin")


def _user_picks(dialog_class, monkeypatch, search: str, listed: list[str], num_classes: int | None = None) -> None:
    """``dialog_class.exec()`` records the rows it lists, searches ``search``, keeps the first row left and accepts."""

    def exec_(dialog) -> int:
        rows = dialog.choices.list
        listed.extend(rows.item(i).text() for i in range(rows.count()))
        dialog.choices.search.setText(search)
        if num_classes is not None:
            dialog.num_classes.setValue(num_classes)
        dialog.accept()
        return QDialog.DialogCode.Accepted.value

    monkeypatch.setattr(dialog_class, "exec", exec_)


@pytest.fixture
def window(qtbot, monkeypatch):
    """The real window with the real prompts; an error dialog would fail the test instead of blocking it."""
    errors: list[str] = []
    monkeypatch.setattr(Prompts, "error", lambda self, message: errors.append(message))
    win = MainWindow()
    qtbot.addWidget(win)
    yield win
    assert errors == []


def test_new_from_architecture_lists_and_builds_an_installed_architecture(window, monkeypatch):
    listed: list[str] = []
    _user_picks(dialogs.NewModelDialog, monkeypatch, "tiny_mlp", listed, num_classes=3)
    assert window.new_from_architecture()
    assert listed[:3] == ["digits_cnn", "tabular_mlp", "tiny_mlp"] and "resnet18" in listed  # builtins, packages, tv
    assert type(window.model).__name__ == "TinyMLP" and type(window.model).__module__ == "workbench_example_plugin"
    assert window.arch_spec == ArchSpec("tiny_mlp", {"num_classes": 3})
    assert window.model(torch.zeros(2, 1, 8, 8)).shape == (2, 3)


def test_a_state_dict_of_an_installed_architecture_opens_and_the_architecture_dialog_offers_it(
        window, monkeypatch, tmp_path):
    from workbench.core.contrib import resolve

    saved = resolve("architecture", "tiny_mlp")(num_classes=4)
    path = tmp_path / "tiny.pt"
    torch.save(saved.state_dict(), path)
    assert window.open_path(path)  # the one architecture that fits every key and shape: no question
    assert window.arch_spec == ArchSpec("tiny_mlp", {"num_classes": 4})
    listed: list[str] = []
    _user_picks(dialogs.ArchitectureDialog, monkeypatch, "tiny_mlp", listed)
    assert window.change_architecture()  # Edit > Change architecture…: the dialog, then build the choice
    assert listed[0] == "tiny_mlp(num_classes=4)    match 100%"
    assert window.arch_spec == ArchSpec("tiny_mlp", {"num_classes": 4})
    assert torch.equal(window.model.out.weight, saved.out.weight)
