"""Samples side by side: the completions of ``samples.jsonl`` grouped by step, and what changed between two steps.

The Samples view (and anyone reading a run folder) asks "what did the model say
at step S, and how does it differ from step T (or from another run)?". The
grouping is by evaluation step, the prompts in the order they were written;
the difference is word-level, by :class:`difflib.SequenceMatcher` (the standard
library's, the one well-kept sequence differ). Qt-free.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

__all__ = ["SampleStep", "steps_of", "word_diff"]

_WORDS = re.compile(r"\s+|[^\s]+")


@dataclass(frozen=True)
class SampleStep:
    """The completions of one evaluation.

    Attributes
    ----------
    step : int
        The optimizer step the samples were taken at.
    epoch : int
        0-based, as ``metrics.csv``'s.
    completions : dict of str to str
        prompt -> completion, in the order written (a prompt written twice at one step: the last wins).
    """

    step: int
    epoch: int
    completions: dict


def steps_of(rows: list[dict]) -> list[SampleStep]:
    """``samples.jsonl`` rows (:func:`~workbench.core.train.task.samples.read_samples`) grouped by step, ascending.

    A row without an integer ``step`` or a string ``prompt`` is left out; a missing completion is ``""``.
    """
    by_step: dict[int, SampleStep] = {}
    for row in rows:
        step, prompt = row.get("step"), row.get("prompt")
        if not isinstance(step, int) or isinstance(step, bool) or not isinstance(prompt, str):
            continue
        epoch = row.get("epoch") if isinstance(row.get("epoch"), int) else 0
        entry = by_step.setdefault(step, SampleStep(step, epoch, {}))
        completion = row.get("completion")
        entry.completions[prompt] = completion if isinstance(completion, str) else ""
    return [by_step[s] for s in sorted(by_step)]


def word_diff(before: str, after: str) -> list[tuple[str, str]]:
    """``after`` as ``(op, text)`` pieces against ``before``, word by word (whitespace kept).

    Returns
    -------
    list of (str, str)
        ``op`` is ``"same"``, ``"added"`` (in ``after`` only) or ``"removed"`` (in
        ``before`` only); joining the ``"same"`` and ``"added"`` texts gives ``after``
        back, the ``"same"`` and ``"removed"`` ones ``before``.
    """
    a, b = _WORDS.findall(before), _WORDS.findall(after)
    out: list[tuple[str, str]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag == "equal":
            out.append(("same", "".join(b[j1:j2])))
            continue
        if i2 > i1:
            out.append(("removed", "".join(a[i1:i2])))
        if j2 > j1:
            out.append(("added", "".join(b[j1:j2])))
    return out
