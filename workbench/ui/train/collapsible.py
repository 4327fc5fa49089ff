"""A titled section of the run inspector that folds open and shut.

:class:`CollapsibleSection` is a flat :class:`QToolButton` with an arrow (the
title) over a content widget; clicking the title shows or hides the content.
The training settings stack several of them in a narrow, vertically scrolling
inspector, the less-used ones shut.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFormLayout, QLayout, QLineEdit, QSizePolicy, QToolButton, QVBoxLayout, QWidget


def compact_form() -> QFormLayout:
    """A :class:`QFormLayout` for a narrow inspector.

    Fields grow to the width there is; when a row's label and field do not fit
    side by side, the field wraps below its label instead of widening the form.

    Returns
    -------
    QFormLayout
        The empty form.
    """
    form = QFormLayout()
    form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
    form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
    form.setLabelAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
    form.setContentsMargins(8, 2, 2, 6)
    return form


def line_edit(name: str, placeholder: str, tip: str) -> QLineEdit:
    """A text field for a narrow inspector form.

    Parameters
    ----------
    name : str
        The field's objectName, e.g. ``"targetEdit"``.
    placeholder : str
        The grey text shown while the field is empty.
    tip : str
        The field's tooltip.

    Returns
    -------
    QLineEdit
        The empty field, at least 100 pixels wide.
    """
    edit = QLineEdit()
    edit.setObjectName(name)
    edit.setPlaceholderText(placeholder)
    edit.setToolTip(tip)
    edit.setMinimumWidth(100)
    return edit


class CollapsibleSection(QWidget):
    """A title button with an arrow and the content it shows or hides.

    Parameters
    ----------
    title : str
        The section's title, e.g. ``"Optimization"``.
    name : str
        The objectName stem: the section is ``<name>Section``, its title button ``<name>Toggle``.
    layout : QLayout
        What the section holds (set on its content widget).
    expanded : bool
        Whether the content shows at first.

    Signals
    -------
    toggled(bool)
        The section was opened (True) or shut (False).
    """

    toggled = Signal(bool)

    def __init__(self, title: str, name: str, layout: QLayout, expanded: bool = True,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName(f"{name}Section")
        self.toggle = QToolButton(text=title, objectName=f"{name}Toggle", checkable=True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setAutoRaise(True)
        self.toggle.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        font = self.toggle.font()
        font.setBold(True)
        self.toggle.setFont(font)
        self.content = QWidget(objectName=f"{name}Content")
        self.content.setLayout(layout)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(0)
        outer.addWidget(self.toggle)
        outer.addWidget(self.content)
        self.toggle.toggled.connect(self._on_toggled)
        self.toggle.setChecked(expanded)
        self._on_toggled(expanded)

    def is_expanded(self) -> bool:
        """True while the content shows."""
        return self.toggle.isChecked()

    def set_expanded(self, flag: bool) -> None:
        """Open (True) or shut (False) the section, as a click on its title does."""
        self.toggle.setChecked(flag)

    def set_fixed(self, fixed: bool, why: str = "") -> None:
        """Disable the content (a run is using these settings) and say ``why`` in its tooltips; False undoes it.

        The title stays clickable, so the settings of the run can still be read.
        """
        self.content.setEnabled(not fixed)
        self.content.setToolTip(why if fixed else "")
        self.set_note(why if fixed else "")

    def set_note(self, text: str) -> None:
        """A line added to the title's tooltip (e.g. what a run lets you change here); "" removes it."""
        self._fixed_why = text
        self._on_toggled(self.is_expanded(), emit=False)

    def _on_toggled(self, flag: bool, emit: bool = True) -> None:
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if flag else Qt.ArrowType.RightArrow)
        tip = f"{'Hide' if flag else 'Show'} the {self.toggle.text()} settings"
        why = getattr(self, "_fixed_why", "")
        self.toggle.setToolTip(f"{tip}\n{why}" if why else tip)
        self.content.setVisible(flag)
        if emit:
            self.toggled.emit(flag)
