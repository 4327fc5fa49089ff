"""Samples side by side: the completions of ``samples.jsonl`` grouped by step, and what changed between two steps.

The Samples view (and anyone reading a run folder) asks "what did the model say
at step S, and how does it differ from step T (or from another run)?". The
grouping is by evaluation step (an on-demand sample's step too), the prompts in
the order they were written; the difference is word-level, by
:class:`difflib.SequenceMatcher` (the standard library's, the one well-kept
sequence differ). :func:`compare_steps` compares two steps of one run,
:func:`compare_with_run` a step with another run's completion of the same prompt
at its nearest step. The view only shows what these return. Qt-free.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

__all__ = ["SampleStep", "PromptDiff", "steps_of", "word_diff", "compare_steps", "nearest_step", "compare_with_run"]

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
    on_demand : bool
        Every row of the step was written by "Sample now" (``"on_demand": true``), none by an evaluation.
    """

    step: int
    epoch: int
    completions: dict
    on_demand: bool = False


@dataclass(frozen=True)
class PromptDiff:
    """One prompt's completion and what changed against another completion of it.

    Attributes
    ----------
    prompt : str
    completion : str
        The completion shown.
    against_step : int or None
        The step of the completion it is compared with (None: compared with nothing).
    pieces : list of (str, str)
        :func:`word_diff` of ``completion`` against that one (``[("same", completion)]`` when none).
    """

    prompt: str
    completion: str
    against_step: int | None
    pieces: list


def steps_of(rows: list[dict]) -> list[SampleStep]:
    """``samples.jsonl`` rows (:func:`~workbench.core.train.task.samples.read_samples`) grouped by step, ascending.

    A row without an integer ``step`` or a string ``prompt`` is left out; a missing completion is ``""``.
    """
    by_step: dict[int, SampleStep] = {}
    evaluated: set[int] = set()
    for row in rows:
        step, prompt = row.get("step"), row.get("prompt")
        if not isinstance(step, int) or isinstance(step, bool) or not isinstance(prompt, str):
            continue
        epoch = row.get("epoch") if isinstance(row.get("epoch"), int) else 0
        entry = by_step.setdefault(step, SampleStep(step, epoch, {}))
        completion = row.get("completion")
        entry.completions[prompt] = completion if isinstance(completion, str) else ""
        if row.get("on_demand") is not True:
            evaluated.add(step)
    return [s if s.step in evaluated else SampleStep(s.step, s.epoch, s.completions, True)
            for s in (by_step[k] for k in sorted(by_step))]


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


def compare_steps(shown: SampleStep, against: SampleStep | None) -> list[PromptDiff]:
    """Each prompt of ``shown`` against the same prompt at ``against`` (another step of the run; None: nothing).

    A prompt ``against`` lacks is compared with nothing (``against_step`` None, one ``"same"`` piece).
    """
    out = []
    for prompt, completion in shown.completions.items():
        before = against.completions.get(prompt) if against is not None else None
        out.append(_diff(prompt, completion, before, against.step if before is not None else None))
    return out


def nearest_step(steps: list[SampleStep], step: int, prompt: str) -> SampleStep | None:
    """The step of ``steps`` holding ``prompt`` nearest to ``step`` (a tie: the earlier); None when none holds it."""
    best = None
    for s in steps:
        if prompt in s.completions and (best is None or abs(s.step - step) < abs(best.step - step)):
            best = s
    return best


def compare_with_run(shown: SampleStep, other: list[SampleStep]) -> list[PromptDiff]:
    """Each prompt of ``shown`` against another run's completion of it at that run's nearest step.

    Parameters
    ----------
    shown : SampleStep
        A step of the run shown.
    other : list of SampleStep
        The other run's steps (:func:`steps_of` of its ``samples.jsonl``), ascending.

    Returns
    -------
    list of PromptDiff
        In ``shown``'s prompt order; ``against_step`` is the other run's step (None when it never completed the
        prompt); the pieces' ``"removed"`` words are the other run's, ``"added"`` ones this run's.
    """
    out = []
    for prompt, completion in shown.completions.items():
        near = nearest_step(other, shown.step, prompt)
        out.append(_diff(prompt, completion, near.completions[prompt] if near is not None else None,
                         near.step if near is not None else None))
    return out


def _diff(prompt: str, completion: str, before: str | None, step: int | None) -> PromptDiff:
    if before is None:
        return PromptDiff(prompt, completion, None, [("same", completion)])
    return PromptDiff(prompt, completion, step, word_diff(before, completion))
