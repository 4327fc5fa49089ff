"""A window's command to a steered run, checked once: :func:`read_command` (and :func:`steer_control`).

The attach server hands each ``{"type": "command", "op": ...}`` message of a
window to its run's ``on_command``; an attached script
(:class:`~workbench.core.attach.script.Attached`) and a headless ``workbench
train`` (:class:`~workbench.core.attach.trainer_attach.TrainerAttach`) both read
it here: the op must be one of :data:`OPS`, the window must steer, and each
field is checked (a name list, a positive finite LR, a param group index, probe
settings of :data:`PROBE_SETTINGS` with the right types and values, a probe
method of :data:`CALLBACK_METHODS`) before anything is queued for the training
thread. A refused command is one line sent back to the window, never raised in
the training step. Qt-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from workbench.core.probe import callback, health
from workbench.core.train.trainer.commands import SampleNow, SaveNow, SetLR, SetTrainable
from workbench.core.train.trainer.control import RunControl

__all__ = ["WindowCommand", "read_command", "steer_control", "OPS", "PROBE_SETTINGS", "CALLBACK_METHODS",
           "MAX_PROBE_CALLBACKS"]

#: The commands a window may send.
OPS = ("freeze", "unfreeze", "set_lr", "pause", "resume", "save_now", "sample_now", "stop", "resolve_nonfinite",
       "callbacks", "callback", "detach")
#: The keyword arguments of :class:`ProbeCallback` a window may set (nothing that names code).
PROBE_SETTINGS = ("every", "grad_every", "budget", "probed", "track_updates", "weight_hist", "thresholds",
                  "layers", "tb_histogram_budget", "flush_ms", "bins", "images")
#: What a window may call on a probe callback it installed (each thread-safe there).
CALLBACK_METHODS = ("set_probed", "set_cadence", "set_weight_histograms")
#: Probe callbacks one window may install in a run (the window's own live probes: one or two).
MAX_PROBE_CALLBACKS = 4


def _names(v) -> bool:
    return isinstance(v, list) and all(isinstance(n, str) for n in v)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _count(v) -> bool:
    return v is None or (isinstance(v, int) and not isinstance(v, bool))


def _share(v) -> bool:
    return _number(v) and math.isfinite(v) and 0 < v <= 1


#: The type each probe setting a window sends must have (checked before the callback is built).
_SETTING_OK = {"every": _count, "grad_every": _count, "budget": _share, "probed": _names,
               "track_updates": lambda v: isinstance(v, bool), "weight_hist": _names,
               "thresholds": lambda v: v is None or isinstance(v, health.HealthThresholds),
               "layers": lambda v: isinstance(v, bool), "tb_histogram_budget": _share,
               "flush_ms": lambda v: _number(v) and math.isfinite(v) and 0 <= v <= 60_000,
               "bins": lambda v: isinstance(v, int) and not isinstance(v, bool) and 2 <= v <= 4096,
               "images": lambda v: isinstance(v, bool)}


@dataclass
class WindowCommand:
    """A window's command, checked (:func:`read_command`).

    Attributes
    ----------
    op : str
        One of :data:`OPS`.
    command : SetTrainable, SetLR, SaveNow, SampleNow or None
        What to queue on the run's control (freeze, unfreeze, set_lr, save_now, sample_now: a causal LM's
        prompts completed now).
    action : str or None
        ``resolve_nonfinite``'s answer (each run says which it takes).
    probe_specs : list of dict or None
        ``callbacks``: the probe callbacks' settings (checked; at most :data:`MAX_PROBE_CALLBACKS`).
    call : (int, str, list) or None
        ``callback``: ``probes[index].method(*args)``.
    """

    op: str
    command: Any = None
    action: str | None = None
    probe_specs: list | None = None
    call: tuple | None = None


def read_command(msg: dict, steering: bool) -> WindowCommand | str:
    """The command a window's message asks for, or why it is refused (one line for the window).

    Parameters
    ----------
    msg : dict
        ``{"type": "command", "op": ..., fields}`` as the server read it.
    steering : bool
        The window steers the run (a read-only window's commands are refused).

    Returns
    -------
    WindowCommand or str
    """
    op = msg.get("op")
    if op not in OPS:
        return f"unknown command {op!r}"
    if not steering:
        return "read-only: another window steers this run"
    if op in ("freeze", "unfreeze"):
        names = msg.get("path", "")
        names = [names] if isinstance(names, str) else names
        if not _names(names):
            return "path must be a module or parameter name, or a list of them"
        return WindowCommand(op, command=SetTrainable(names, op == "unfreeze"))
    if op == "set_lr":
        lr, group = msg.get("lr"), msg.get("group")
        if not _number(lr) or not (math.isfinite(lr) and lr > 0):
            return "lr must be a positive number"
        if group is not None and (not isinstance(group, int) or isinstance(group, bool) or group < 0):
            return "group must be a param group's index"
        return WindowCommand(op, command=SetLR(float(lr), group))
    if op == "save_now":
        return WindowCommand(op, command=SaveNow(None))
    if op == "sample_now":
        return WindowCommand(op, command=SampleNow())
    if op == "resolve_nonfinite":
        action = msg.get("action")
        return WindowCommand(op, action=action if isinstance(action, str) else "")
    if op == "callbacks":
        return _read_callbacks(msg.get("callbacks"))
    if op == "callback":
        index, method, args = msg.get("index"), msg.get("method"), msg.get("args")
        if method not in CALLBACK_METHODS or not isinstance(index, int) or isinstance(index, bool) \
                or not isinstance(args, (list, tuple)) or not 0 <= index < MAX_PROBE_CALLBACKS:
            return f"callback method {method!r} refused"
        problem = _callback_args_problem(method, list(args))
        return problem or WindowCommand(op, call=(index, method, list(args)))
    return WindowCommand(op)  # pause, resume, stop, detach


def steer_control(control: RunControl, cmd: WindowCommand) -> bool:
    """Apply what only needs the run's control: queue a freeze, LR, save or sample; pause, resume, stop.

    Returns
    -------
    bool
        True when done; False for the ops the run itself handles (resolve_nonfinite, callbacks, callback, detach).
    """
    if cmd.command is not None:
        control.queue(cmd.command)
    elif cmd.op == "pause":
        control.pause()
    elif cmd.op == "resume":
        control.resume()
    elif cmd.op == "stop":
        control.request_stop()
    else:
        return False
    return True


def _read_callbacks(specs) -> WindowCommand | str:
    if not isinstance(specs, list) or len(specs) > MAX_PROBE_CALLBACKS:
        return "callbacks must be a list of probe settings"
    clean = []
    for spec in specs:
        if not isinstance(spec, dict) or spec.get("kind") != "probe" or not isinstance(spec.get("settings"), dict):
            return "only Workbench's probe callback can be installed"
        settings = spec["settings"]
        unknown = [k for k in settings if k not in PROBE_SETTINGS]
        if unknown:
            return f"probe settings refused: {', '.join(map(str, unknown))}"
        wrong = [k for k, v in settings.items() if not _SETTING_OK[k](v)]
        if wrong:
            return f"probe settings refused: wrong type of {', '.join(wrong)}"
        try:  # the values too, here: a bad one must be refused, never raised in the training step
            callback.ProbeCallback(lambda reports: None, **settings)
        except (TypeError, ValueError, AttributeError) as exc:
            return f"probe settings refused: {exc}"
        clean.append(dict(settings))
    return WindowCommand("callbacks", probe_specs=clean)


def _callback_args_problem(method: str, args: list) -> str | None:
    """Why ``method(*args)`` from a window is refused (wrong count or types), or None."""
    if method in ("set_probed", "set_weight_histograms"):
        return None if len(args) == 1 and _names(args[0]) else f"{method} takes one list of names"
    if method == "set_cadence":
        every, budget = (list(args) + [None, None])[:2]
        if len(args) > 2 or not _count(every) or (every is not None and every < 1):
            return "set_cadence takes every (None or >= 1) and a budget"
        if budget is not None and not (_number(budget) and math.isfinite(budget) and 0 < budget <= 1):
            return "set_cadence's budget must be a share in (0, 1]"
        return None
    return f"callback method {method!r} refused"
