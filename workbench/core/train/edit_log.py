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

from workbench.core.train.commands import SaveNow, SetLR, SetTrainable
from workbench.core.train.hooks import Callback

__all__ = ["EDITS_FILE", "EditLog", "ReplayEdits", "read_edits"]

#: The file name, in the run folder.
EDITS_FILE = "edits.jsonl"


def _record(cmd) -> dict | None:
    if isinstance(cmd, SetTrainable):
        if cmd.error or not cmd.changed or cmd.scheduled:
            return None  # nothing changed: nothing to replay
        return {"op": "set_trainable", "names": list(cmd.changed), "flag": bool(cmd.flag)}
    if isinstance(cmd, SetLR):
        return {"op": "set_lr", "lr": float(cmd.lr)}
    if isinstance(cmd, SaveNow):
        return {"op": "save_now"}
    return None


class EditLog:
    """Appends edits to ``run_dir/edits.jsonl`` (rank 0 / the only process)."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / EDITS_FILE

    def write(self, step: int, entry: dict) -> None:
        """Append ``{"step": step, **entry}`` as one line (flushed: a crash keeps every earlier line)."""
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"step": int(step), **entry}) + "\n")
            f.flush()

    def command(self, step: int, cmd) -> None:
        """Record an applied command (those without an effect on the run, e.g. ``EmptyCudaCache``, are skipped)."""
        entry = _record(cmd)
        if entry is not None:
            self.write(step, entry)


def read_edits(path: str | Path) -> list[dict]:
    """The edits of an ``edits.jsonl``, in file order.

    Raises
    ------
    ValueError
        A line that is not a JSON object with an integer ``step`` and a known ``op`` (the line number is named).
    """
    out = []
    for i, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            ok = isinstance(entry, dict) and isinstance(entry.get("step"), int) and entry.get("op") in (
                "set_trainable", "set_lr", "save_now", "pause", "resume")
        except json.JSONDecodeError:
            ok = False
        if not ok:
            raise ValueError(f"{path}, line {i}: not an edit record ({line[:80]!r}); fix or delete the line")
        out.append(entry)
    return out


def _command(entry: dict):
    op = entry["op"]
    if op == "set_trainable":
        return SetTrainable(list(entry["names"]), bool(entry["flag"]))
    if op == "set_lr":
        return SetLR(float(entry["lr"]))
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
