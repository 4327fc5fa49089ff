"""What a window takes from a script: the welcome and every event, checked field by field before any of it is used.

The wire (:mod:`~workbench.core.attach.wire`) rebuilds only data, but not its
shape: a field annotated ``np.ndarray`` may arrive as a list, a step as a
string, a module tree 5,000 levels deep. A script is a peer across a socket,
so the window checks what it receives here, in core, and a peer that sends
something else is refused in one line (:class:`SchemaError`, naming the field).

Hand-written, no library: each event dataclass is checked against its own
annotations (``int``, ``float``, ``str``, ``bool``, ``np.ndarray``,
``dict[str, X]``, ``list[X]``, ``tuple[X, ...]``, ``X | None``, nested
dataclasses), and the fields annotated only ``dict`` or ``Any`` against the
rules below. Every walk is iterative (an explicit stack), and the welcome is
bounded in entries and depth (:data:`MAX_MODULES`, :data:`MAX_TENSORS`,
:data:`MAX_DEPTH`): no input reaches Python's recursion limit or the
window's memory.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Callable

import numpy as np

from workbench.core.attach.notice import NOTICE_KINDS, Notice
from workbench.core.probe import activations, callback, layer_stats, stats
from workbench.core.train.events import (CommandApplied, EpochEnded, Finished, FitStarted, Metrics, NonFinite, Paused,
                                         ProgressText, RunError, Sink)
from workbench.core.train.trainer.commands import SampleNow, SaveNow, SetLR, SetTrainable
from workbench.core.train.trainer.nan_trace import NonFiniteTrace

__all__ = ["SchemaError", "check_welcome", "check_event", "check_ack", "check_steering", "MAX_MODULES", "MAX_TENSORS", "MAX_DEPTH",
           "MAX_NAME_CHARS", "MAX_TENSOR_DIMS", "MAX_TEXT_CHARS"]

#: The most modules a welcome's model may list. The largest common models list far fewer (a 70B Llama ~1,100,
#: Mixtral 8x7B ~1,400); the window's tree takes ~1 s per 30,000 modules on the 2-core reference machine,
#: on the GUI thread, so 32,768 keep that under 2 s. More is refused in one line.
MAX_MODULES = 32_768
#: The most parameters and buffers together a welcome's model may list (two per module: a weight and a bias).
MAX_TENSORS = 2 * MAX_MODULES
#: The deepest module tree a welcome may describe (dots in a qualified name, plus one). Real models nest
#: under 20 levels; torch's ``named_modules`` and the window's tree recurse once or more per level, and
#: Python stops at 1,000 frames.
MAX_DEPTH = 64
#: The longest qualified name (characters) of a module or tensor in a welcome.
MAX_NAME_CHARS = 1_000
#: The most dimensions a tensor's shape may have in a welcome (torch's own kernels stop at 25).
MAX_TENSOR_DIMS = 32
#: The longest text (characters) an event or a welcome may carry in one string: a traceback is a few
#: thousand; a status line of megabytes would hold the GUI thread while it is laid out.
MAX_TEXT_CHARS = 100_000


class SchemaError(ValueError):
    """A welcome, event or reply that is not what a Workbench script sends; the message names the field."""


_Rule = Callable[[Any, str], list]  # (value, where) -> the children to check, as (value, hint, where)
_NUMBER = (int, float)


# ------------------------------------------------------------------ the walk
def _check(value: Any, hint: Any, where: str) -> None:
    stack = [(value, hint, where)]
    while stack:
        v, h, w = stack.pop()
        stack.extend(_step(v, h, w))


def _step(v: Any, h: Any, w: str) -> list:
    if h is Any:
        return []
    if isinstance(h, _RuleType):
        if not h.accepts(v):
            raise SchemaError(f"{w}: expected {h.name}, got {_got(v)}")
        return h.fn(v, w)
    origin = typing.get_origin(h)
    if origin in (typing.Union, types.UnionType):
        if v is None and type(None) in typing.get_args(h):
            return []
        for alt in typing.get_args(h):
            if alt is not type(None) and _shallow(v, alt):
                return [(v, alt, w)]
        raise SchemaError(f"{w}: expected {_name(h)}, got {_got(v)}")
    if not _shallow(v, h):
        raise SchemaError(f"{w}: expected {_name(h)}, got {_got(v)}")
    if h is str and len(v) > MAX_TEXT_CHARS:
        raise SchemaError(f"{w}: a text of {len(v):,} characters (limit {MAX_TEXT_CHARS:,})")
    args = typing.get_args(h)
    if origin in (list, tuple) and args:
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(v) != len(args):
                raise SchemaError(f"{w}: expected {len(args)} items, got {len(v)}")
            return [(x, a, f"{w}[{i}]") for i, (x, a) in enumerate(zip(v, args))]
        return [(x, args[0], f"{w}[{i}]") for i, x in enumerate(v)]
    if origin is dict and args:
        out = []
        for k, x in v.items():
            if not _shallow(k, args[0]):
                raise SchemaError(f"{w}: a key {_got(k)} where {_name(args[0])} belongs")
            out.append((x, args[1], f"{w}[{k!r}]"))
        return out
    if isinstance(h, type) and dataclasses.is_dataclass(h):
        return _dataclass_fields(v, h, w)
    return []


def _shallow(v: Any, h: Any) -> bool:
    """``v`` is of ``h``'s outer kind (its items are checked after)."""
    if h is Any:
        return True
    if isinstance(h, _RuleType):
        return h.accepts(v)
    origin = typing.get_origin(h) or h
    if origin in (typing.Union, types.UnionType):
        return any(_shallow(v, a) for a in typing.get_args(h))
    if origin is float:
        return isinstance(v, _NUMBER) and not isinstance(v, bool)
    if origin is int:
        return isinstance(v, int) and not isinstance(v, bool)
    if origin in (list, tuple):  # the wire keeps tuples, but a list where a tuple was built is the same data
        return isinstance(v, (list, tuple))
    if origin is type(None):
        return v is None
    if isinstance(origin, type):
        return isinstance(v, origin)
    return False


def _name(h: Any) -> str:
    if isinstance(h, _RuleType):
        return h.name
    if h is np.ndarray:
        return "an array"
    if typing.get_origin(h) in (typing.Union, types.UnionType):
        return " or ".join(_name(a) for a in typing.get_args(h))
    origin = typing.get_origin(h) or h
    return {float: "a number", int: "an integer", str: "text", bool: "true/false", dict: "a table",
            list: "a list", tuple: "a list", type(None): "nothing"}.get(origin, getattr(origin, "__name__", str(h)))


def _got(v: Any) -> str:
    return "an array" if isinstance(v, np.ndarray) else f"{type(v).__name__} {_short(v)}"


def _short(v: Any) -> str:
    text = repr(v) if isinstance(v, (str, int, float, bool)) or v is None else f"of {len(v)}" if hasattr(
        v, "__len__") else ""
    return text if len(text) <= 40 else text[:37] + "..."


class _RuleType:
    """A hand-written rule standing where an annotation says only ``dict`` or ``Any``."""

    def __init__(self, name: str, accepts: Callable[[Any], bool], fn: _Rule):
        self.name, self.accepts, self.fn = name, accepts, fn


def _rule(name: str, accepts: Callable[[Any], bool]):
    return lambda fn: _RuleType(name, accepts, fn)


# ------------------------------------------------------------------ dataclasses: their annotations, and rules
_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        hints = typing.get_type_hints(cls)
        _HINTS[cls] = {f.name: _FIELDS.get((cls, f.name), hints.get(f.name, Any)) for f in dataclasses.fields(cls)
                       if f.init}
    return _HINTS[cls]


def _dataclass_fields(v: Any, cls: type, w: str) -> list:
    check = _AFTER.get(cls)
    if check is not None:
        check(v, w)
    return [(getattr(v, name), h, f"{w}.{name}") for name, h in _hints(cls).items()]


def _is_table(v: Any) -> bool:
    return isinstance(v, dict)


def _str_keys(v: dict, w: str) -> None:
    for k in v:
        if not isinstance(k, str):
            raise SchemaError(f"{w}: a key {_got(k)} where text belongs")


def _typed_keys(v: dict, w: str, known: dict[str, Any]) -> list:
    """The known keys of a table checked against their types; any other key is plain data nobody reads."""
    _str_keys(v, w)
    return [(v[k], h, f"{w}[{k!r}]") for k, h in known.items() if k in v]


_OPT_NUM = float | None
_EPOCH_KEYS = {"epoch": _OPT_NUM, "step": _OPT_NUM, "epochs_completed": _OPT_NUM, "train_loss": _OPT_NUM,
               "val_loss": _OPT_NUM, "val_acc": _OPT_NUM, "val_accuracy": _OPT_NUM, "time": _OPT_NUM,
               "time_s": _OPT_NUM, "lr": _OPT_NUM, "best": bool | int | None, "skipped": list[str] | None}


@_rule("a table of epoch metrics", _is_table)
def _epoch_metrics(v: dict, w: str) -> list:
    return _typed_keys(v, w, _EPOCH_KEYS)


@_rule("a table of the run's plan", _is_table)
def _fit_info(v: dict, w: str) -> list:
    return _typed_keys(v, w, {"epoch": _OPT_NUM, "step": _OPT_NUM, "epochs": _OPT_NUM, "steps_per_epoch": _OPT_NUM,
                              "total_steps": _OPT_NUM, "run_dir": str | None, "data_note": str | None,
                              "history": list[_epoch_metrics] | None})


@_rule("a table of step metrics", _is_table)
def _step_metrics(v: dict, w: str) -> list:
    _str_keys(v, w)
    n = None
    for k, a in v.items():
        if not isinstance(a, np.ndarray) or a.ndim != 1 or a.dtype.kind not in "biuf":
            raise SchemaError(f"{w}[{k!r}]: expected a 1-D array of numbers, got {_got(a)}"
                              + (f" of shape {a.shape}" if isinstance(a, np.ndarray) else ""))
        if n is not None and len(a) != n:
            raise SchemaError(f"{w}[{k!r}]: {len(a)} values where the others have {n}")
        n = len(a)
    return []


@_rule("a NaN trace", _is_table)
def _nan_trace(v: dict, w: str) -> list:
    return _typed_keys(v, w, typing.get_type_hints(NonFiniteTrace))


@_rule("a command (SetTrainable, SetLR, SaveNow or SampleNow)",
       lambda v: isinstance(v, (SetTrainable, SetLR, SaveNow, SampleNow)))
def _command(v: Any, w: str) -> list:
    return [(v, type(v), w)]


@_rule("a list of probe reports", lambda v: isinstance(v, (list, tuple)))
def _reports(v: list, w: str) -> list:
    return [(x, callback.ProbeReport, f"{w}[{i}]") for i, x in enumerate(v)]


@_rule("a callback's index", lambda v: isinstance(v, int) and not isinstance(v, bool))
def _index(v: int, w: str) -> list:
    if v < 0:
        raise SchemaError(f"{w}: a negative index {v}")
    return []


#: Fields whose annotation says too little (``dict``, ``Any``, a bare ``list``): the rule that stands for it.
_FIELDS: dict[tuple[type, str], Any] = {
    (FitStarted, "info"): _fit_info, (Metrics, "values"): _step_metrics, (EpochEnded, "metrics"): _epoch_metrics,
    (CommandApplied, "command"): _command, (NonFinite, "trace"): _nan_trace, (Sink, "index"): _index,
    (Sink, "data"): _reports, (SetTrainable, "names"): str | list[str], (SetTrainable, "changed"): list[str],
    (SaveNow, "nonfinite"): list[str], (SampleNow, "rows"): list[dict[str, int | str | bool]],
}


def _histogram(v: stats.Histogram, w: str) -> None:
    if not isinstance(v.counts, np.ndarray) or v.counts.ndim != 1:
        raise SchemaError(f"{w}.counts: expected a 1-D array, got {_got(v.counts)}")


def _snapshot(v: layer_stats.LayerSnapshot, w: str) -> None:
    n = len(v.names) if isinstance(v.names, (list, tuple)) else -1
    want = (n, len(layer_stats.QUANTITIES))
    if not isinstance(v.values, np.ndarray) or v.values.shape != want or v.values.dtype.kind != "f":
        raise SchemaError(f"{w}.values: expected a float array of shape {want}, got {_got(v.values)}"
                          + (f" of shape {v.values.shape}" if isinstance(v.values, np.ndarray) else ""))
    if not isinstance(v.types, (list, tuple)) or len(v.types) != n:
        raise SchemaError(f"{w}.types: expected {n} class names")


def _activation(v: activations.ActivationStats, w: str) -> None:
    if isinstance(v.image, np.ndarray) and v.image.ndim not in (2, 3):
        raise SchemaError(f"{w}.image: expected a 2-D or 3-D array, got {v.image.ndim}-D")


#: Relations between the fields of one dataclass (checked before its fields).
def _notice(v: Notice, w: str) -> None:
    if v.kind not in NOTICE_KINDS:
        raise SchemaError(f"{w}.kind: {_short(v.kind)} is not a notice Workbench knows")


_AFTER: dict[type, Callable[[Any, str], None]] = {
    stats.Histogram: _histogram, layer_stats.LayerSnapshot: _snapshot, activations.ActivationStats: _activation,
    Notice: _notice}
#: The events a window takes from a script (:data:`workbench.core.attach.script.PUBLISHED`); others never pass.
_EVENTS = (FitStarted, Metrics, ProgressText, EpochEnded, CommandApplied, NonFinite, RunError, Paused, Sink,
           Finished, Notice)


def check_event(event: Any) -> None:
    """Check one event from a script against its type's fields (see the module docstring).

    Raises
    ------
    SchemaError
        Not an event a script publishes, or a field of the wrong type or shape (the message names it).
    """
    cls = type(event)
    if cls not in _EVENTS:
        raise SchemaError(f"{cls.__name__} is not an event a script sends")
    _check(event, cls, cls.__name__)


# ------------------------------------------------------------------ the welcome and the replies
def check_ack(msg: dict) -> None:
    """Check a reply to a command (``{"type": "ack", "id": int, "ok": bool, "error": str or None}``).

    Raises
    ------
    SchemaError
        A field of the wrong type.
    """
    _check(msg, _ACK, "reply")


def check_steering(msg: dict) -> None:
    """Check a change of this window's steering (``{"type": "steering", "steering": bool, "reason": str}``).

    Raises
    ------
    SchemaError
        A field missing or of the wrong type.
    """
    if not isinstance(msg.get("steering"), bool):
        raise SchemaError("steering: expected true/false")
    _check(msg, _STEERING, "steering")


def check_welcome(msg: Any) -> dict:
    """The welcome ``msg``, checked whole before any of it is used; its ``info`` table.

    ``info``'s known keys (``name``, ``pid``, ``step``, ``lrs``, ``model``...) are typed
    (:func:`~workbench.core.model.skeleton.describe_structure`'s lists for ``model``), the model at most
    :data:`MAX_MODULES` modules, :data:`MAX_TENSORS` tensors and :data:`MAX_DEPTH` levels; other keys are
    plain data that nothing reads.

    Raises
    ------
    SchemaError
        Not a welcome, or a field of the wrong type, or a model past a limit (the message names which).
    """
    if not isinstance(msg, dict) or msg.get("type") != "welcome":
        raise SchemaError("not a welcome")
    _check(msg, _WELCOME, "welcome")
    return msg["info"]


def _dotted(name: str, w: str, depth: int) -> None:
    if len(name) > MAX_NAME_CHARS:
        raise SchemaError(f"{w}: a name of {len(name):,} characters (limit {MAX_NAME_CHARS:,})")
    if name.count(".") + 1 > depth:
        raise SchemaError(f"{w}: {name.count('.') + 1:,} levels deep (limit {MAX_DEPTH})")


def _entries(v: list, w: str, kinds: tuple, depth: int) -> list:
    out = []
    for i, e in enumerate(v):
        at = f"{w}[{i}]"
        if not isinstance(e, (list, tuple)) or len(e) != len(kinds):
            raise SchemaError(f"{at}: expected a list of {len(kinds)} items, got {_got(e)}")
        if not isinstance(e[0], str):
            raise SchemaError(f"{at}[0]: expected a qualified name, got {_got(e[0])}")
        _dotted(e[0], at, depth)
        out.extend((x, k, f"{at}[{j}]") for j, (x, k) in enumerate(zip(e, kinds)) if j)
    return out


@_rule("a shape", lambda v: isinstance(v, (list, tuple)))
def _shape(v: list, w: str) -> list:
    if len(v) > MAX_TENSOR_DIMS:
        raise SchemaError(f"{w}: {len(v)} dimensions (limit {MAX_TENSOR_DIMS})")
    if not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**40 for d in v):
        raise SchemaError(f"{w}: expected sizes (whole numbers >= 0), got {_short(list(v))}")
    return []


@_rule("a model structure (modules, params, buffers)", _is_table)
def _structure(v: dict, w: str) -> list:
    _str_keys(v, w)
    for key in ("modules", "params", "buffers"):
        if v.get(key) is not None and not isinstance(v[key], (list, tuple)):
            raise SchemaError(f"{w}[{key!r}]: expected a list, got {_got(v[key])}")
    modules, params, buffers = v.get("modules"), v.get("params") or [], v.get("buffers") or []
    if modules is None:
        raise SchemaError(f"{w}: no 'modules' list")
    if len(modules) > MAX_MODULES:
        raise SchemaError(f"{w}: {len(modules):,} modules (limit {MAX_MODULES:,})")
    if len(params) + len(buffers) > MAX_TENSORS:
        raise SchemaError(f"{w}: {len(params) + len(buffers):,} parameters and buffers (limit {MAX_TENSORS:,})")
    out = _entries(modules, f"{w}['modules']", (str, str), MAX_DEPTH)
    out += _entries(params, f"{w}['params']", (str, _shape, str, bool), MAX_DEPTH + 1)
    out += _entries(buffers, f"{w}['buffers']", (str, _shape, str), MAX_DEPTH + 1)
    return out


@_rule("a table of the script's run", _is_table)
def _info(v: dict, w: str) -> list:
    return _typed_keys(v, w, {
        "name": str, "pid": int, "address": str, "run_dir": str, "model_class": str, "step": int,
        "epoch": float, "paused": bool, "lrs": list[float], "device": str, "torch": str, "model": _structure,
        "stopping": bool, "pause_lease_s": float, "pause_lease": str, "problems": list[str]})


@_rule("a welcome", _is_table)
def _welcome(v: dict, w: str) -> list:
    if "info" not in v:
        raise SchemaError(f"{w}: no 'info' table")
    return _typed_keys(v, w, {"info": _info, "steering": bool, "steered_elsewhere": bool, "history": int})


@_rule("a reply", _is_table)
def _ack(v: dict, w: str) -> list:
    return _typed_keys(v, w, {"id": int | None, "ok": bool, "error": str | None})


@_rule("a change of steering", _is_table)
def _steering(v: dict, w: str) -> list:
    return _typed_keys(v, w, {"steering": bool, "reason": str})


_WELCOME, _ACK, _STEERING = _welcome, _ack, _steering
