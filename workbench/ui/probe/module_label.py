"""A module name short enough for an axis label that keeps what tells layers apart: the block index and the leaf.

``bert.encoder.layer.5.attention.self.value`` in 22 characters is
``…layer.5…self.value``, not ``bert.encode…self.value`` (the index gone: every
layer's ``value`` read the same).
"""

from __future__ import annotations

from workbench.ui.axis_fit import ELLIPSIS, elide_middle

__all__ = ["elide_module_name"]


def _joined(prefix: list[str], dropped_prefix: bool, core: str, rest: list[str], dropped_rest: bool) -> str:
    """``[…]prefix.core(.|…)rest``: an ellipsis where segments were dropped."""
    head = (ELLIPSIS if dropped_prefix else "") + "".join(seg + "." for seg in prefix)
    if not rest:
        return head + core
    return head + core + (ELLIPSIS if dropped_rest else ".") + ".".join(rest)


def elide_module_name(name: str, max_chars: int) -> str:
    """``name`` in ``max_chars`` characters at most, whole segments dropped around its last index.

    The last numeric segment and the one before it (``layer.5``, ``layers.15``, ``h.11``;
    the index alone when they do not fit) and the leaf stay; then as many segments after
    the index as fit (nearest the leaf first), then before it (nearest the index first);
    an ellipsis stands where segments were dropped. A name without an index, or whose index and leaf alone do not fit, is
    shortened in the middle (:func:`~workbench.ui.axis_fit.elide_middle`).

    Parameters
    ----------
    name : str
        A qualified module name (``encoder.layer.11.attention.output.dense``).
    max_chars : int
        Longest result, characters (at least 3).

    Returns
    -------
    str
    """
    if len(name) <= max_chars:
        return name
    segs = name.split(".")
    index = next((i for i in range(len(segs) - 1, -1, -1) if segs[i].isdigit()), None)
    if index is None:
        return elide_middle(name, max_chars)
    for start in (max(0, index - 1), index):  # the index with its owner's name, else alone
        core, before, after = ".".join(segs[start:index + 1]), segs[:start], segs[index + 1:]
        if len(_joined([], bool(before), core, after[-1:], len(after) > 1)) <= max_chars:
            return _grown(core, before, after, max_chars)
    return elide_middle(name, max_chars)


def _grown(core: str, before: list[str], after: list[str], max_chars: int) -> str:
    """``core`` and the leaf, with as many of the segments ``after`` and ``before`` as fit in ``max_chars``."""
    rest = after[-1:]
    prefix: list[str] = []
    for seg in reversed(after[:-1]):  # the segments between the index and the leaf, nearest the leaf first
        trial = [seg, *rest]
        if len(_joined(prefix, bool(before), core, trial, len(trial) < len(after))) > max_chars:
            break
        rest = trial
    for seg in reversed(before):  # then the segments before the index, nearest it first
        trial = [seg, *prefix]
        if len(_joined(trial, len(trial) < len(before), core, rest, len(rest) < len(after))) > max_chars:
            break
        prefix = trial
    return _joined(prefix, len(prefix) < len(before), core, rest, len(rest) < len(after))
