"""The Help menu: Documentation (F1) opens the local README, About Workbench lists the versions.

Nothing here uses the network: the documentation is the README.md and docs/
folder next to the package (a source checkout or an editable install), opened
with the desktop's own viewer.
"""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Qt, QUrl, qVersion
from PySide6.QtGui import QDesktopServices, QGuiApplication, QKeySequence
from PySide6.QtWidgets import QMenuBar, QMessageBox, QWidget

import workbench
from workbench.core.versions import collect_versions, format_versions

__all__ = ["HelpMenu", "about_text", "documentation_paths"]

#: Shown when neither README.md nor docs/ is next to the package (an installed wheel).
NO_DOCS = ("The documentation (README.md and docs/) is not installed with this copy of Workbench: "
           "it is in the project's source folder.")


def documentation_paths(root: Path | None = None) -> list[Path]:
    """The local documentation that exists: ``README.md`` and ``docs/`` of the source folder.

    Parameters
    ----------
    root : Path, optional
        The folder holding them; default the parent of the ``workbench`` package.

    Returns
    -------
    list of Path
        Existing ones only, README first; empty for an installed wheel.
    """
    root = Path(workbench.__file__).resolve().parent.parent if root is None else root
    return [path for path in (root / "README.md", root / "docs") if path.exists()]


def about_text() -> str:
    """The About box's text: one line on Workbench, then :func:`~workbench.core.versions.format_versions`."""
    rows = collect_versions({"Qt (runtime)": qVersion()})
    return ("Workbench: open any PyTorch checkpoint, freeze layers, train and look inside while it runs.\n\n"
            + format_versions(rows))


class HelpMenu:
    """Adds Help > Documentation (F1), Documentation folder and About Workbench to a menu bar.

    Parameters
    ----------
    menu_bar : QMenuBar
    parent : QWidget
        Parent of the About box; its status bar, if any, says when no documentation is found.

    Attributes
    ----------
    documentation_action, docs_folder_action, about_action : QAction
        objectNames ``documentationAction``, ``docsFolderAction``, ``aboutAction``.
    """

    def __init__(self, menu_bar: QMenuBar, parent: QWidget):
        self._parent = parent
        menu = menu_bar.addMenu("&Help")
        menu.setObjectName("helpMenu")
        self.documentation_action = menu.addAction("&Documentation")
        self.documentation_action.setObjectName("documentationAction")
        self.documentation_action.setShortcut(QKeySequence("F1"))
        self.documentation_action.setStatusTip("Open the README (local file, no network)")
        self.documentation_action.triggered.connect(lambda: self.open_documentation(0))
        self.docs_folder_action = menu.addAction("Documentation &folder")
        self.docs_folder_action.setObjectName("docsFolderAction")
        self.docs_folder_action.setStatusTip("Open the docs/ folder (API map, plugins)")
        self.docs_folder_action.triggered.connect(lambda: self.open_documentation(1))
        menu.addSeparator()
        self.about_action = menu.addAction("&About Workbench")
        self.about_action.setObjectName("aboutAction")
        self.about_action.setMenuRole(self.about_action.MenuRole.AboutRole)
        self.about_action.triggered.connect(self.show_about)

    def open_documentation(self, which: int = 0) -> bool:
        """Open the README (``which=0``) or the docs folder (1) with the desktop's viewer; False when not found."""
        paths = documentation_paths()
        wanted = [p for p in paths if (p.is_dir() if which else p.is_file())]
        if not wanted:
            bar = getattr(self._parent, "statusBar", None)
            if bar is not None:
                bar().showMessage(NO_DOCS, 15000)
            return False
        return QDesktopServices.openUrl(QUrl.fromLocalFile(str(wanted[0])))

    def show_about(self) -> QMessageBox:
        """Open the About box (window-modal, not blocking) and return it; its text can be selected and copied."""
        box = QMessageBox(self._parent)
        box.setObjectName("aboutDialog")
        box.setWindowTitle("About Workbench")
        box.setIcon(QMessageBox.Icon.Information)
        text = about_text()
        intro, _, versions = text.partition("\n\n")
        box.setTextFormat(Qt.TextFormat.RichText)  # the versions in a monospace block, columns aligned
        box.setText(f"<p>{html.escape(intro)}</p><pre>{html.escape(versions)}</pre>")
        box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                    | Qt.TextInteractionFlag.TextSelectableByKeyboard)
        copy = box.addButton("&Copy versions", QMessageBox.ButtonRole.ActionRole)
        copy.setObjectName("copyVersionsButton")
        copy.setToolTip("Copy this text to the clipboard, for a bug report")
        copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(text))
        box.addButton(QMessageBox.StandardButton.Close)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        return box
