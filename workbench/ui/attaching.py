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
from workbench.core.errors import WorkbenchError
from workbench.core.model.skeleton import SkeletonError, build_skeleton
from workbench.core.remote.attached import BACK, LOST
from workbench.core.train.events import FitStarted
from workbench.ui.threading import run_in_background
from workbench.ui.train.steering import NOTICE_MS

__all__ = ["attach_window", "attach_remote_window", "attach_on_host", "RECONNECTING"]

log = logging.getLogger("workbench.attach")

#: What a remote run's lost connection shows, until it is back (never "crashed": the run trains on).
RECONNECTING = "disconnected, reconnecting…"


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

    return _attach_with(window, work, address, cancel)


def attach_remote_window(window, target, steer: bool | str = True) -> bool:
    """Attach ``window`` to a run or script on a host (``target``: a :class:`~workbench.remote.RemoteRun` or a
    :class:`~workbench.core.remote.waiting.RemoteScript`) through the tunnel Workbench manages.

    Its port and token are read on the host over ssh (never stored), the tunnel is opened and closed by the
    handle; a lost connection shows "disconnected, reconnecting…" (status bar, progress bar, title) until the
    handle is back, never "crashed". Returns as :func:`attach_window`.
    """
    if window.training_panel.is_running():
        window.session.show_status("Stop or detach the current run before attaching to a run.", 8000)
        return False
    callbacks = window.session.training_callbacks()
    where = f"{getattr(target, 'id', None) or getattr(target, 'name', '?')} on {target.host}"

    def work():  # on a worker thread: ssh, the tunnel and the welcome never freeze the window
        handle = target.attach(steer=steer, callbacks=callbacks)
        try:
            return handle, build_skeleton(handle.info.get("model") or {})
        except BaseException:
            handle.close()
            raise

    return _attach_with(window, work, where, None)


def attach_on_host(window) -> bool:
    """File > Attach to a run on a host…: the dialog (:mod:`workbench.ui.remote_attach_dialog`), then attach."""
    from workbench.ui.remote_attach_dialog import ask_remote_target

    chosen = ask_remote_target(window)
    return attach_remote_window(window, *chosen) if chosen else False


def _attach_with(window, work, where: str, cancel: ConnectCancel | None) -> bool:
    """Run ``work`` (connect, build the structure) off the GUI thread, then show the run as attached."""
    panel = window.training_panel
    try:
        handle, skeleton = run_in_background(work, f"Attaching to {where}…", window,
                                             on_cancel=cancel.cancel if cancel is not None else None)
    except AttachError as exc:
        if cancel is not None and cancel.cancelled:
            window.session.show_status(f"Attaching to {where} cancelled.", 8000)
        else:
            window.prompts.error(f"Attach: {exc}")
        return False
    except SkeletonError as exc:
        window.prompts.error(f"Attach: the script's model cannot be shown: {exc}")
        return False
    except WorkbenchError as exc:  # ssh failed, or the run on the host does not listen: its own line
        window.prompts.error(f"Attach: {exc}")
        return False
    except Exception as exc:  # noqa: BLE001 - whatever a peer sent, the File menu's slot says one line
        log.exception("attaching to %s", where)
        window.prompts.error(f"Attach: {where} sent what the window cannot show ({type(exc).__name__}: {exc})")
        return False
    if cancel is not None and cancel.cancelled:  # pressed as the welcome arrived
        handle.close()
        window.session.show_status(f"Attaching to {where} cancelled.", 8000)
        return False
    info = handle.info
    try:
        window.session.set_model(skeleton, source=f"attached · {info.get('name', 'script')} "
                                                   f"(pid {info.get('pid')}) · {handle.address}")
        if not panel.attach(handle):
            handle.close()
            return False
        _follow(window, handle)
        return True
    except Exception as exc:  # noqa: BLE001 - as above: one line, the connection let go
        log.exception("attaching to %s", where)
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
            return  # its line is in the status bar already (the panel's Steering.on_notice)
        if event.kind in (LOST, BACK):
            _show_connection(window, name, event.kind == LOST)
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


def _show_connection(window, name: str, lost: bool) -> None:
    """A remote run's connection lost (or back): the progress bar, the title and the file label say so."""
    bar = window.training_panel.run_progress.bar
    fmt = bar.format().replace(f"{RECONNECTING} · ", "")
    bar.setFormat(f"{RECONNECTING} · {fmt}" if lost else fmt)
    source = window.session.source or name
    source = source.replace(f" · {RECONNECTING}", "") + (f" · {RECONNECTING}" if lost else "")
    window.session.source = source
    window.setWindowTitle(f"Workbench — {source}")
    label = getattr(window, "status_file", None)
    if label is not None:
        label.setText(source)


def _show_paused(panel, paused: bool) -> None:
    """Mark the training panel paused or not (Pause / Resume, the progress bar) without sending a command."""
    show = getattr(panel, "show_paused", None)
    if show is not None:
        show(paused)
        return
    panel._paused = panel.run_progress.paused = bool(paused)
    panel.update_buttons()
