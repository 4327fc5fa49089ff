"""The main window's status bar: what is open (format by its human name), its counts, and messages read whole.

The permanent labels on the right take no more than :data:`FILE_LABEL_WIDTH` for
the file (elided in the middle, whole in its tooltip), so a temporary message on
the left keeps the room; a message the bar cuts is whole in the bar's tooltip.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QLabel, QStatusBar

__all__ = ["FORMAT_NAMES", "FILE_LABEL_WIDTH", "ElidedLabel", "StatusLine", "format_name", "human_source"]

#: A checkpoint format id (``CheckpointMetadata.format``) as the window names it.
FORMAT_NAMES = {
    "state_dict": "state_dict",
    "training_dict": "training checkpoint",
    "lightning": "Lightning checkpoint",
    "pickled_module": "pickled module",
    "safetensors": "safetensors",
    "torchscript": "TorchScript",
    "hf_folder": "Hugging Face folder",
    "timm_folder": "timm folder",
}
#: The widest the file label on the right of the status bar gets, px: the rest is the messages' (at 1280 px
#: the labels had left a message ~750 px and cut "(Edit > Ch…").
FILE_LABEL_WIDTH = 280


def format_name(fmt: str) -> str:
    """``fmt`` (a format id such as ``"hf_folder"``) by its human name; an unknown id as it is."""
    return FORMAT_NAMES.get(fmt, fmt)


def human_source(source: str, fmt: str | None) -> str:
    """``source`` (``"<file> · <format id>[ · ...]"``, :attr:`Session.source`) with the format by its human name.

    Parameters
    ----------
    source : str
        What the session says was opened.
    fmt : str or None
        The opened checkpoint's format id; None (the demo, a new model) leaves ``source`` as it is.
    """
    if not fmt:
        return source
    parts = source.split(" · ")
    return " · ".join(format_name(part) if i == 1 and part == fmt else part for i, part in enumerate(parts))


class ElidedLabel(QLabel):
    """A one-line label no wider than ``max_width`` px that elides its text in the middle; ``text()`` stays whole.

    Its tooltip is the whole text.
    """

    def __init__(self, max_width: int, **kwargs):
        super().__init__(**kwargs)
        self._max_width = max_width

    def setText(self, text: str) -> None:  # noqa: N802 - Qt override
        """Show ``text`` (elided when wider than the label); the tooltip gets it whole."""
        super().setText(text)
        self.setToolTip(text)
        self.updateGeometry()

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        """The text's width, :attr:`max_width` at most."""
        hint = super().sizeHint()
        return QSize(min(hint.width(), self._max_width), hint.height())

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        """As narrow as a few characters."""
        least = min(self.sizeHint().width(), self.fontMetrics().averageCharWidth() * 8)
        return QSize(least, super().sizeHint().height())

    def shown_text(self) -> str:
        """The text as painted: elided in the middle to the label's width."""
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideMiddle, self.contentsRect().width())

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Paint :meth:`shown_text`."""
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        painter.drawText(self.contentsRect(), int(self.alignment() | Qt.AlignmentFlag.AlignVCenter), self.shown_text())


class StatusLine:
    """The permanent labels of ``bar`` (objectNames ``statusFile``, ``statusTrainable``, ``statusSize``,
    ``statusDevice``) and its whole-message tooltip.

    Parameters
    ----------
    bar : QStatusBar

    Attributes
    ----------
    file, trainable, size, device : QLabel
    """

    def __init__(self, bar: QStatusBar):
        self.bar = bar
        self.file = ElidedLabel(FILE_LABEL_WIDTH, objectName="statusFile")
        self.trainable = QLabel(objectName="statusTrainable")
        self.size = QLabel(objectName="statusSize")
        self.device = QLabel(objectName="statusDevice")
        # every label permanent (right side): a temporary message takes the left and never paints over them
        for label in (self.file, self.trainable, self.size, self.device):
            bar.addPermanentWidget(label)
        bar.messageChanged.connect(self._on_message)

    def _on_message(self, text: str) -> None:
        """A message shown (or cleared): whole in the bar's tooltip, however much of it the bar shows."""
        self.bar.setToolTip(text)
