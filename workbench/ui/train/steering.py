"""Whether this window steers the run it shows, and what a run's notices say in it.

Another window can take the steering of an attached run (``connect(..., steer="take")``); this one is then
told (a ``Notice`` of kind ``read_only``) and only watches: :class:`Steering` disables the steering controls
(the LR field, Pause / Resume, Save now, Stop) with :data:`READ_ONLY_TIP` as their tooltip, and through
``changed`` the tree's checkboxes, until the run ends or the window steers again.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

__all__ = ["Steering", "READ_ONLY_TIP", "NOTICE_MS"]

#: Milliseconds a run's notice (a write that failed, Save now that failed) stays in the status bar: read, not glimpsed.
NOTICE_MS = 30_000
#: The tooltip of the steering controls (tree checkboxes, LR, Pause, Save now, Stop) while another window steers.
READ_ONLY_TIP = ("Read-only: another window steers this run (it took over the steering). Detach, then attach "
                 "again with \u201cTake over steering\u201d to steer it from here.")


class Steering(QObject):
    """Follows whether the panel's window steers its run.

    Parameters
    ----------
    panel : TrainingPanel
        Its ``run`` (``steers()``), ``settings`` (``set_running``, ``live_widgets``, ``lr_spin``),
        ``is_running()``, ``update_buttons()`` and ``session`` (``show_status``).

    Attributes
    ----------
    reason : str
        ``""`` while this window steers (or no run), else why not (:data:`READ_ONLY_TIP`).

    Signals
    -------
    changed(str)
        :attr:`reason` changed.
    """

    changed = Signal(str)

    def __init__(self, panel):
        super().__init__(panel)
        self._panel = panel
        self.reason = ""

    def follow(self) -> None:
        """Read whether the run is steered from here (:meth:`RunController.steers`) and show it in the controls."""
        panel = self._panel
        reason = "" if not panel.is_running() or panel.run.steers() else READ_ONLY_TIP
        if reason == self.reason:
            return
        self.reason = reason
        panel.update_buttons()
        panel.settings.set_running(panel.is_running())  # the live fields as a run has them, tooltips too
        if reason:
            for widget in panel.settings.live_widgets():
                widget.setEnabled(False)
            panel.settings.lr_spin.setToolTip(reason)
        self.changed.emit(reason)

    def on_notice(self, event) -> None:
        """A run's notice: its line in the status bar; ``read_only``: this window watches from now on."""
        self._panel.session.show_status(event.text, NOTICE_MS)
        if event.kind == "read_only":
            self.follow()

    def run_ended(self) -> None:
        """A run that ends leaves nothing read-only."""
        if self.reason:
            self.reason = ""
            self.changed.emit("")

    def refuses(self) -> bool:
        """True (and the status bar says why) when a command from elsewhere in the window must not be sent."""
        if self.reason:
            self._panel.session.show_status(f"Not sent. {self.reason}", 8000)
        return bool(self.reason)
