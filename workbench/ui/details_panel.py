"""The Details dock: the selected module's parameters and buffers, and its badges."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QLabel, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget

from workbench.core.formatting import format_bytes, format_count, format_int, format_shape
from workbench.ui.model_tree import ParamRow

DETAIL_COLUMNS = ("Name", "Shape", "dtype", "Device", "requires_grad", "numel")
#: Above this many tensors the table lists the first ones only (the root of a huge model).
MAX_ROWS = 2000


class DetailsPanel(QWidget):
    """A heading (name, type, counts, badges) over a table of tensors (objectName ``detailsTable``).

    For a module, the table lists the parameters and buffers of its whole subtree
    (names relative to the model); for a parameter row, that parameter alone.
    """

    def __init__(self, parent=None):
        super().__init__(parent)
        self.heading = QLabel(objectName="detailsHeading", wordWrap=True)
        self.heading.setTextFormat(Qt.TextFormat.PlainText)
        self.table = QTableWidget(0, len(DETAIL_COLUMNS), objectName="detailsTable")
        self.table.setHorizontalHeaderLabels(list(DETAIL_COLUMNS))
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.table.horizontalHeader().setStretchLastSection(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.heading)
        layout.addWidget(self.table)
        self.show_node(None)

    def show_node(self, obj, badges: list | None = None) -> None:
        """Show a ``ModuleNode`` or ``ParamRow`` (None clears the panel)."""
        if obj is None:
            self.heading.setText("Select a module in the Model tree.")
            self.table.setRowCount(0)
            return
        if isinstance(obj, ParamRow):
            self.heading.setText(f"{obj.info.name}  ·  parameter  ·  {format_int(obj.info.numel)} elements")
            self._fill([obj.info])
            return
        self.heading.setText(self._module_heading(obj, badges or []))
        self._fill(self._tensors_below(obj))

    @staticmethod
    def _module_heading(node, badges: list) -> str:
        lines = [f"{node.name or node.short_name}  ·  {node.type_name}",
                 f"params {format_int(node.total_params)} ({format_count(node.total_params)})  ·  "
                 f"trainable {format_int(node.trainable_params)}  ·  {format_bytes(node.total_bytes)}"]
        if node.output_shape is not None:
            lines.append(f"output {format_shape(node.output_shape)}")
        lines += [f"⚠ {b.text} (value {b.value:.3g}, step {b.step})" for b in badges]
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
        self.table.setUpdatesEnabled(False)
        self.table.setRowCount(len(infos))
        right = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
        for row, info in enumerate(infos):
            kind = " (buffer)" if info.is_buffer else ""
            values = (info.name + kind, format_shape(info.shape), info.dtype, info.device,
                      "" if info.is_buffer else str(bool(info.requires_grad)), format_int(info.numel))
            for col, text in enumerate(values):
                item = QTableWidgetItem(text)
                if col == len(values) - 1:
                    item.setTextAlignment(right)
                self.table.setItem(row, col, item)
        self.table.setUpdatesEnabled(True)
        self.table.resizeColumnToContents(0)
