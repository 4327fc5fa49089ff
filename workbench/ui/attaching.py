"""File > Attach to a running script, after the dialog: connect off the GUI thread, show the script's model, start.

Whatever the peer sends, the window says one line (``prompts.error``) and
nothing escapes the slot: :func:`~workbench.core.attach.client.connect` checks
the welcome whole (:mod:`workbench.core.attach.schema`) within one deadline on
a worker thread, where the script's model structure is also built; the busy
dialog's Cancel closes the connection at once. Events are checked in core
before they reach the training panel's slots.
"""

from __future__ import annotations

import logging

from workbench.core.attach.client import AttachError, ConnectCancel, connect
from workbench.core.model.skeleton import SkeletonError, build_skeleton
from workbench.ui.threading import run_in_background

__all__ = ["attach_window"]

log = logging.getLogger("workbench.attach")


def attach_window(window, address: str, token: str, steer: bool = True) -> bool:
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
        return panel.attach(handle)
    except Exception as exc:  # noqa: BLE001 - as above: one line, the connection let go
        log.exception("attaching to %s", address)
        handle.close()
        window.prompts.error(f"Attach: the script at {handle.address} cannot be shown ({type(exc).__name__}: "
                             f"{exc})")
        return False
