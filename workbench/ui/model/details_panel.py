"""The Details dock: the selected module's parameters and buffers, and its health badges.

The badges are the ones the model tree shows (``ModelTreeModel.badges(name)``,
from :mod:`workbench.core.probe.health`): one line each under the heading, with the
tree's colour, what was measured, its value and the step (objectName ``detailsBadges``).
"""

from __future__ import annotations

import html
import math

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from workbench.core.formatting import format_bytes, format_count, format_int, format_shape
from workbench.ui.model.tree_model import BADGE_COLORS, ParamRow

DETAIL_COLUMNS = ("Name", "Shape", "dtype", "Device", "requires_grad", "numel")
#: Above this many tensors the table lists the first ones only (the root of a huge model).
MAX_ROWS = 2000
_BADGE_TITLES = {"nonfinite": "non-finite values", "exploding_grad": "exploding gradient",
                 "vanishing_grad": "vanishing gradient", "dead_units": "dead units"}


def badge_value_text(badge) -> str:
    """``"norm 4.89e+03"`` / ``"100.0 % zeros"`` / ``"3.1 % NaN/Inf"``: the measured value in its unit."""
    v = badge.value
    if badge.kind == "dead_units":
        return f"{v:.1%} exact zeros"
    if badge.kind == "nonfinite":
        return f"{v:.1%} NaN/Inf" if 0.0 <= v <= 1.0 else f"norm {v}"
    return f"grad norm {v:.3g}" if math.isfinite(v) else f"grad norm {v}"


def badge_step_text(badge) -> str:
    """``"step 12"``, or ``"probe batch"`` for a measurement outside training (step -1)."""
    return "probe batch" if badge.step is None or badge.step < 0 else f"step {badge.step}"


def badges_html(badges: list) -> str:
    """Rich text for the badge lines: a dot in the tree's colour, the finding, value and step."""
    lines = []
    for b in badges:
        color = BADGE_COLORS.get(b.kind, "#616161")
        title = _BADGE_TITLES.get(b.kind, b.kind)
        lines.append(f'<span style="color:{color}">&#9679;</span> <b>{html.escape(title)}</b>: '
                     f"{html.escape(badge_value_text(b))}, {html.escape(badge_step_text(b))}")
    return "<br>".join(lines)


class DetailsPanel(QWidget):
    """A heading (name, type, counts, badges) over a table of tensors (objectName ``detailsTable``).

    For a module, the table lists the parameters and buffers of its whole subtree
    (names relative to the model); for a parameter row, that parameter alone.
    """

    def __init__(self, parent=None):
        super().__init__(parent)
        self.heading = QLabel(objectName="detailsHeading", wordWrap=True)
        self.heading.setTextFormat(Qt.TextFormat.PlainText)
        self.badges_label = QLabel(objectName="detailsBadges", wordWrap=True)
        self.badges_label.setTextFormat(Qt.TextFormat.RichText)
        self.badges_label.setVisible(False)
        self._rows: list[tuple] = []
        self.table = QTableWidget(0, len(DETAIL_COLUMNS), objectName="detailsTable")
        self.table.setHorizontalHeaderLabels(list(DETAIL_COLUMNS))
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.table.horizontalHeader().setStretchLastSection(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.heading)
        layout.addWidget(self.badges_label)
        layout.addWidget(self.table)
        self.show_node(None)

    def show_node(self, obj, badges: list | None = None) -> None:
        """Show a ``ModuleNode`` or ``ParamRow`` (None clears the panel) and the module's badges.

        Called again for the same node whenever the badges change (live, during
        training): the table is only rewritten where its text changed, so the
        user's scroll position and selection stay.

        Parameters
        ----------
        obj : ModuleNode, ParamRow or None
        badges : list of core.probe.health.Badge, optional
            The module's badges (as shown in the tree); ignored for a parameter row.
        """
        if obj is None:
            self.heading.setText("Select a module in the Model tree.")
            self._show_badges([])
            self._fill([])
            return
        if isinstance(obj, ParamRow):
            shared = f"  ·  shared with {obj.info.name}" if obj.alias is not None else ""
            self.heading.setText(f"{obj.path}  ·  parameter  ·  {format_int(obj.info.numel)} elements{shared}")
            self._show_badges([])
            self._fill([obj.info])
            return
        self.heading.setText(self._module_heading(obj))
        self._show_badges(list(badges or []))
        self._fill(self._tensors_below(obj))

    def _show_badges(self, badges: list) -> None:
        self.badges_label.setText(badges_html(badges))
        self.badges_label.setToolTip("\n".join(b.text for b in badges))
        self.badges_label.setVisible(bool(badges))

    @staticmethod
    def _module_heading(node) -> str:
        lines = [f"{node.name or node.short_name}  ·  {node.type_name}",
                 f"params {format_int(node.total_params)} ({format_count(node.total_params)})  ·  "
                 f"trainable {format_int(node.trainable_params)}  ·  {format_bytes(node.total_bytes)}"]
        if node.output_shape is not None:
            lines.append(f"output {format_shape(node.output_shape)}")
        return "\n".join(lines)

    @staticmethod
    def _tensors_below(node) -> list:
        out = []
        for sub in node.walk():
            out.extend(sub.params)
            out.extend(sub.buffers)
            if len(out) >= MAX_ROWS:
                break
        return out[:MAX_ROWS]

    def _fill(self, infos: list) -> None:
        rows = [self._row_texts(info) for info in infos]
        if rows == self._rows:
            return  # same text (a badge-only refresh): keep scroll position and selection
        self.table.setUpdatesEnabled(False)
        self.table.setRowCount(len(rows))
        right = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
        for row, values in enumerate(rows):
            if row < len(self._rows) and self._rows[row] == values:
                continue
            for col, text in enumerate(values):
                item = QTableWidgetItem(text)
                if col == len(values) - 1:
                    item.setTextAlignment(right)
                self.table.setItem(row, col, item)
        self.table.setUpdatesEnabled(True)
        self.table.resizeColumnToContents(0)
        self._rows = rows

    @staticmethod
    def _row_texts(info) -> tuple:
        kind = " (buffer)" if info.is_buffer else ""
        return (info.name + kind, format_shape(info.shape), info.dtype, info.device,
                "" if info.is_buffer else str(bool(info.requires_grad)), format_int(info.numel))
