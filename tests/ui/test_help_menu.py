"""Help > Documentation opens the local README; Help > About lists the versions, selectable."""

from __future__ import annotations

import torch
from PySide6.QtCore import Qt
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QLabel, QMessageBox

import workbench
from workbench.ui import help_menu


def test_documentation_opens_the_local_readme_without_network(window, monkeypatch):
    opened = []
    monkeypatch.setattr(QDesktopServices, "openUrl", staticmethod(lambda url: opened.append(url) or True))
    action = window.help_menu.documentation_action
    assert action.shortcut().toString() == "F1" and action.text().replace("&", "") == "Documentation"
    action.trigger()
    window.help_menu.docs_folder_action.trigger()
    assert [url.isLocalFile() for url in opened] == [True, True]
    assert opened[0].toLocalFile().endswith("/README.md") and opened[1].toLocalFile().endswith("/docs")


def test_documentation_says_so_when_no_readme_is_installed(window, monkeypatch, tmp_path):
    opened = []
    monkeypatch.setattr(QDesktopServices, "openUrl", staticmethod(lambda url: opened.append(url) or True))
    monkeypatch.setattr(help_menu, "documentation_paths", lambda root=None: [])
    assert window.help_menu.open_documentation() is False and opened == []
    assert "not installed" in window.statusBar().currentMessage()


def test_about_shows_the_versions_as_selectable_text(window, qtbot):
    window.help_menu.about_action.trigger()
    box = window.findChild(QMessageBox, "aboutDialog")
    assert box is not None and box.isVisible()
    text = box.text()
    for needle in ("Workbench", workbench.__version__, torch.__version__, "torchvision", "PySide6",
                   "pyqtgraph", "CUDA", "Qt (runtime)"):
        assert needle in text, needle
    label = next(lab for lab in box.findChildren(QLabel) if torch.__version__ in lab.text())
    assert label.textInteractionFlags() & Qt.TextInteractionFlag.TextSelectableByMouse
    copy = next(b for b in box.buttons() if b.objectName() == "copyVersionsButton")
    copy.click()  # copies, for a bug report, and closes the box
    pasted = QGuiApplication.clipboard().text()
    assert "torch:" in pasted and torch.__version__ in pasted and "<pre>" not in pasted
    qtbot.waitUntil(lambda: window.findChild(QMessageBox, "aboutDialog") is None)
