"""The fit line under the run bar: "Memory: 1.52 MB of 12.0 GB free on cpu — fits", one line, elided.

It shows text it is given (the window's memory feed computes it in core, off the
GUI thread: :func:`workbench.core.model.memory.fit_line` and ``fit_summary``);
the full text and the long advice are its tooltip.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSizePolicy

__all__ = ["FitLine", "FIT_PENDING", "FIT_ATTACHED"]

#: What the line says while an estimate is being made (the first one after a model opens).
FIT_PENDING = "Memory: estimating…"
#: What the line says while a window follows an attached run: no estimate is made while a run owns the model
#: (the memory feed skips it), so "estimating…" stayed until the run ended.
FIT_ATTACHED = "Memory: not estimated for an attached run (it trains in its own process)"


class FitLine(QLabel):
    """One elided line (objectName ``fitLine``): the memory a training step needs against the device's.

    Its width never widens the Training dock (horizontal size policy Ignored);
    the text elides at its end and the whole of it is the tooltip.
    """

    def __init__(self, parent=None):
        super().__init__(parent, objectName="fitLine")
        self._full = ""
        self._fits: bool | None = None
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setVisible(False)

    def show_fit(self, line: str, details: str = "", fits: bool | None = None) -> None:
        """Show ``line`` (one line), with ``details`` (the long advice) below it in the tooltip.

        Parameters
        ----------
        line : str
            E.g. ``"Memory: 1.52 MB of 12.0 GB free on cpu — fits"``; empty hides the line.
        details : str
            More in the tooltip (``fit_summary``'s sentence, what is counted).
        fits : bool, optional
            False draws the line in the theme's warning colour (bold); None: no judgement.
        """
        self._full = line
        self._fits = fits
        self.setToolTip("\n\n".join(t for t in (line, details) if t))
        font = self.font()
        font.setBold(fits is False)
        self.setFont(font)
        self.setStyleSheet("color: #c62828;" if fits is False else "")
        self.setVisible(bool(line))
        self._elide()

    def show_attached(self) -> None:
        """An attached run began: say that its memory is not estimated here (replaces a pending "estimating…")."""
        self.show_fit(FIT_ATTACHED, "The window estimates the memory of the runs it starts; an attached run's "
                      "memory is its own process's, on its device. The estimate comes back when the run ends.")

    @property
    def full_text(self) -> str:
        """The line as given (the label shows it elided to its width)."""
        return self._full

    @property
    def fits(self) -> bool | None:
        """Whether the last line said the step fits (None: unknown)."""
        return self._fits

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Elide the line again to the new width."""
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        width = max(0, self.contentsRect().width())
        self.setText(self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, width))
