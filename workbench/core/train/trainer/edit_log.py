"""Mid-run edits recorded in the run folder and replayed by ``workbench train run.toml``.

Every command a run applies (freeze / unfreeze with the parameter names it
changed, LR change, save now) and every pause and resume is appended to
``run_dir/edits.jsonl``, one JSON object per line with the step at which it was
applied (``step`` = steps completed before it: the command acted between step
``step`` and step ``step + 1``). :class:`ReplayEdits` reads the file beside a
run.toml and queues each command so that it applies at the same boundary, so a
window run with mid-run edits replays bit-identically on CPU. No tool the
product is compared with records these edits (issue "Experiments").
"""

from __future__ import annotations

import json
from pathlib import Path

from workbench.core.files import append_jsonl

from workbench.core.train.trainer.commands import SaveNow, SetLR, SetTrainable
from workbench.core.train.trainer.hooks import Callback

__all__ = ["EDITS_FILE", "MAX_EDITS_BYTES", "EditLog", "ReplayEdits", "read_edits"]

#: The file name, in the run folder.
EDITS_FILE = "edits.jsonl"


def _record(cmd) -> dict | None:
    if isinstance(cmd, SetTrainable):
        if cmd.error or not cmd.changed or cmd.scheduled:
            return None  # nothing changed: nothing to replay
        return {"op": "set_trainable", "names": list(cmd.changed), "flag": bool(cmd.flag)}
    if isinstance(cmd, SetLR):
        entry = {"op": "set_lr", "lr": float(cmd.lr)}
        if cmd.group is not None:
            entry["group"] = int(cmd.group)
        return entry
    if isinstance(cmd, SaveNow):
        return {"op": "save_now"}
    return None


class EditLog:
    """Appends edits to ``run_dir/edits.jsonl`` (rank 0 / the only process).

    Parameters
    ----------
    run_dir : str or Path
    writes : WriteWatch, optional
        Where a failed write is told (:class:`~workbench.core.train.runs.writes.WriteWatch`) instead of raised:
        a freeze or a pause never ends the run on a full disk (that line is lost; the next one is tried).
    """

    def __init__(self, run_dir: str | Path, writes=None):
        self.path = Path(run_dir) / EDITS_FILE
        self.writes = writes

    def write(self, step: int, entry: dict) -> None:
        """Append ``{"step": step, **entry}`` as one line (flushed: a crash keeps every earlier line).

        Raises
        ------
        OSError
            The line could not be written whole (a full disk): the file is cut back to its earlier lines,
            so the next write appends a whole line after them. Told through ``writes`` instead when given.
        """
        if self.writes is None:
            self._append(step, entry)
            return
        try:
            self._append(step, entry)
        except OSError as exc:
            self.writes.failed(self.path, exc, f"not written (the {entry.get('op', 'edit')} at step {step} is not "
                                               "recorded)")
        else:
            self.writes.ok(self.path)

    def _append(self, step: int, entry: dict) -> None:
        append_jsonl(self.path, [{"step": int(step), **entry}])  # whole or not at all

    def command(self, step: int, cmd) -> None:
        """Record an applied command (those without an effect on the run, e.g. ``EmptyCudaCache``, are skipped)."""
        entry = _record(cmd)
        if entry is not None:
            self.write(step, entry)


#: Each op's fields and a check of each value: validated in full before a run starts.
_FIELDS = {
    "set_trainable": {"names": lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v),
                      "flag": lambda v: isinstance(v, bool)},
    "set_lr": {"lr": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf")},
    "save_now": {},
    "pause": {},
    "resume": {},
}
_WANTS = {"names": "a list of parameter names", "flag": "true or false", "lr": "a positive number"}
#: An edits.jsonl larger than this is refused (bytes): a run's edits are a few lines per user action.
MAX_EDITS_BYTES = 64 * 1024 * 1024


def _problem(entry) -> str | None:
    """What is wrong with one decoded line, or None."""
    if not isinstance(entry, dict):
        return "not a JSON object"
    step = entry.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        return "'step' must be a whole number >= 0"
    fields = _FIELDS.get(entry.get("op"))
    if fields is None:
        return f"unknown op {entry.get('op')!r} (known: {', '.join(_FIELDS)})"
    for name, ok in fields.items():
        if name not in entry:
            return f"op {entry['op']!r} lacks its field {name!r}"
        if not ok(entry[name]):
            return f"op {entry['op']!r}: {name!r} must be {_WANTS[name]}, not {entry[name]!r}"
    return None


def read_edits(path: str | Path) -> list[dict]:
    """The edits of an ``edits.jsonl``, in file order, each validated completely (op, fields and their types).

    Raises
    ------
    ValueError
        The file is not UTF-8 or larger than :data:`MAX_EDITS_BYTES`, or a line is
        not a JSON object with an integer ``step`` >= 0, a known ``op`` and that
        op's fields of the right types; the message names the file, the line and
        what is wrong.
    OSError
        The file cannot be read.
    """
    path = Path(path)
    if path.stat().st_size > MAX_EDITS_BYTES:
        raise ValueError(f"{path}: larger than {MAX_EDITS_BYTES // 2**20} MB, not an edits log; move it away")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start}); fix or delete the file") from None
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            problem = _problem(json.loads(line))
        except json.JSONDecodeError:
            problem = "not JSON"
        except RecursionError:  # json's decoder recurses per nesting level
            problem = "nested too deeply"
        if problem is not None:
            raise ValueError(f"{path}, line {i}: {problem} ({line[:80]!r}); fix or delete the line")
        out.append(json.loads(line))
    return out


def _command(entry: dict):
    op = entry["op"]
    if op == "set_trainable":
        return SetTrainable(list(entry["names"]), bool(entry["flag"]))
    if op == "set_lr":
        group = entry.get("group")
        return SetLR(float(entry["lr"]), group if isinstance(group, int) and not isinstance(group, bool) else None)
    if op == "save_now":
        return SaveNow()
    return None  # pause / resume change nothing in the result


class ReplayEdits(Callback):
    """Queue recorded edits so each applies at its recorded step boundary.

    Parameters
    ----------
    edits : list of dict
        From :func:`read_edits`.
    out : callable, optional
        ``out(text)`` for one line per replayed edit.
    """

    def __init__(self, edits: list[dict], out=None):
        self.edits = sorted(edits, key=lambda e: e["step"])  # stable: same-step edits keep their order
        self.out = out
        self._next = 0

    def _queue_through(self, trainer, step: int) -> None:
        while self._next < len(self.edits) and self.edits[self._next]["step"] <= step:
            entry = self.edits[self._next]
            self._next += 1
            if entry["step"] < step:
                continue  # before the resume point: already in the checkpoint's state
            cmd = _command(entry)
            if cmd is not None:
                trainer.queue(cmd)
            if self.out is not None:
                what = {k: v for k, v in entry.items() if k not in ("step", "op")}
                self.out(f"edit at step {entry['step']}: {entry['op']} {what if what else ''}".rstrip()
                         + ("" if cmd is not None else " (not replayed)"))

    def on_fit_start(self, trainer) -> None:  # noqa: D102 - edits before the first step (or the resume step)
        self._next = 0
        self._queue_through(trainer, int(trainer.step))

    def on_step_end(self, trainer, metrics) -> None:  # noqa: D102 - applied at the next boundary
        self._queue_through(trainer, int(metrics["step"]))
