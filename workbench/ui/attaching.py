"""File > Attach to a running script, after the dialog: connect off the GUI thread, show the script's model, start.

Whatever the peer sends, the window says one line (``prompts.error``) and
nothing escapes the slot: :func:`~workbench.core.attach.client.connect` checks
the welcome whole (:mod:`workbench.core.attach.schema`) within one deadline on
a worker thread, where the script's model structure is also built; the busy
dialog's Cancel closes the connection at once. Events are checked in core
before they reach the training panel's slots.

Once attached the window shows the script's real state (paused, stopping, a
write failing) from its welcome, and every :class:`~workbench.core.attach.notice.Notice`
the script sends (a failed write, a failed Save now, a lapsed pause lease,
this window made read-only) in the status bar; when the run ends or is
detached, no label says "attached" any more.
"""

from __future__ import annotations

import logging

from workbench.core.attach.client import AttachError, ConnectCancel, connect
from workbench.core.attach.notice import Notice
from workbench.core.model.skeleton import SkeletonError, build_skeleton
from workbench.core.train.events import FitStarted
from workbench.ui.threading import run_in_background

__all__ = ["attach_window", "NOTICE_MS"]

log = logging.getLogger("workbench.attach")

#: Milliseconds a script's notice stays in the status bar: a failed write must be read, not glimpsed.
NOTICE_MS = 30_000


def attach_window(window, address: str, token: str, steer: bool | str = True) -> bool:
    """Attach ``window`` (a :class:`~workbench.ui.main_window.MainWindow`) to the script at ``address``.

    Returns
    -------
    bool
        True when attached; False after saying why not in one line (a run is going, nothing listens there,
        a wrong token, a welcome that fails its check, a structure that cannot be shown, Cancel pressed).
    """
    panel = window.training_panel
    if panel.is_running():
        window.session.show_status("Stop or detach the current run before attaching to a script.", 8000)
        return False
    callbacks = window.session.training_callbacks()
    cancel = ConnectCancel()

    def work():  # on a worker thread: a remote script behind a slow tunnel never freezes the window
        handle = connect(address, token, steer=steer, callbacks=callbacks, cancel=cancel)
        try:
            return handle, build_skeleton(handle.info.get("model") or {})
        except BaseException:
            handle.close()
            raise

    try:
        handle, skeleton = run_in_background(work, f"Attaching to {address}…", window, on_cancel=cancel.cancel)
    except AttachError as exc:
        if cancel.cancelled:
            window.session.show_status(f"Attaching to {address} cancelled.", 8000)
        else:
            window.prompts.error(f"Attach: {exc}")
        return False
    except SkeletonError as exc:
        window.prompts.error(f"Attach: the script's model cannot be shown: {exc}")
        return False
    except Exception as exc:  # noqa: BLE001 - whatever a peer sent, the File menu's slot says one line
        log.exception("attaching to %s", address)
        window.prompts.error(f"Attach: {address} sent what the window cannot show ({type(exc).__name__}: {exc})")
        return False
    if cancel.cancelled:  # pressed as the welcome arrived
        handle.close()
        window.session.show_status(f"Attaching to {address} cancelled.", 8000)
        return False
    info = handle.info
    try:
        window.session.set_model(skeleton, source=f"attached · {info.get('name', 'script')} "
                                                   f"(pid {info.get('pid')}) · {handle.address}")
        if not panel.attach(handle):
            return False
        _follow(window, handle)
        return True
    except Exception as exc:  # noqa: BLE001 - as above: one line, the connection let go
        log.exception("attaching to %s", address)
        handle.close()
        window.prompts.error(f"Attach: the script at {handle.address} cannot be shown ({type(exc).__name__}: "
                             f"{exc})")
        return False


def _follow(window, handle) -> None:
    """Show the script's state of the moment and its notices until the run ends, then drop "attached"."""
    panel, session = window.training_panel, window.session
    info = handle.info
    name = str(info.get("name", "the script"))
    said = []  # the script's state when attached, one line each
    if info.get("paused"):
        _show_paused(panel, True)
        said.append(f"{name} is paused at step {info.get('step', '?')}: Resume to go on")
    if info.get("stopping"):
        panel.run_progress.show_stopping()
        said.append(f"{name} is stopping")
    said += [f"{name}: {p}" for p in info.get("problems") or [] if isinstance(p, str)]
    state_line = ". ".join(said)

    def on_event(event) -> None:
        if isinstance(event, FitStarted) and state_line:  # after the panel's own line on the run's start
            session.show_status(state_line, NOTICE_MS)
        if not isinstance(event, Notice):
            return
        session.show_status(f"{name}: {event.text}", NOTICE_MS)
        if event.kind == "lease_lapsed" and info.get("pause_lease") != "hold":
            _show_paused(panel, False)

    def on_running(running: bool) -> None:
        if running:
            return
        panel.runEvent.disconnect(on_event)
        panel.runningChanged.disconnect(on_running)
        reason = handle.reason or "ended"
        source = f"{name} (pid {info.get('pid')}) · " + (
            "detached: the script trains on" if reason == "detached" else f"script run {reason}")
        session.source = source
        window.setWindowTitle(f"Workbench — {source}")
        label = getattr(window, "status_file", None)
        if label is not None:
            label.setText(source)

    panel.runEvent.connect(on_event)
    panel.runningChanged.connect(on_running)


def _show_paused(panel, paused: bool) -> None:
    """Mark the training panel paused or not (Pause / Resume, the progress bar) without sending a command."""
    show = getattr(panel, "show_paused", None)
    if show is not None:
        show(paused)
        return
    panel._paused = panel.run_progress.paused = bool(paused)
    panel._update_buttons()
