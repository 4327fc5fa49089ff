"""Health badges: vanishing / exploding gradients, dead units, non-finite values.

The checks read results that :mod:`workbench.core.probe.activations` and
:mod:`workbench.core.probe.gradients` already produced (plain floats on the CPU);
nothing here touches a tensor. Thresholds are the usual rules of thumb and are
configurable through :class:`HealthThresholds`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from workbench.core.probe.activations import ActivationStats
    from workbench.core.probe.gradients import GradNorms

__all__ = ["Badge", "HealthThresholds", "activation_badges", "check_health", "grad_badges", "layer_badges",
           "merge_badges", "with_onsets"]

BADGE_KINDS = ("vanishing_grad", "exploding_grad", "dead_units", "nonfinite")


@dataclass
class Badge:
    """One health finding on one module row.

    Attributes
    ----------
    kind : str
        ``"vanishing_grad"``, ``"exploding_grad"``, ``"dead_units"`` or ``"nonfinite"``.
    value : float
        The measured value: a grad norm (L2, same units as the gradient) for the
        gradient kinds, a fraction in [0, 1] for ``dead_units`` and ``nonfinite``.
    step : int
        Training step of the measurement (-1 for a probe batch outside training).
    text : str
        Hover text naming the measured value and the step.
    since : int
        First step of the unbroken run of measurements that raised this badge
        (:func:`with_onsets`; -1: not tracked).
    """

    kind: str
    value: float
    step: int
    text: str
    since: int = -1


@dataclass
class HealthThresholds:
    """When a badge is shown.

    Attributes
    ----------
    vanishing_abs : float
        Vanishing gradient when a module's own grad norm is below this (default 1e-7).
    vanishing_rel : float or None
        Also vanishing when ``norm / global_norm`` is below this (default 1e-7; None disables).
    exploding : float
        Exploding gradient when a module's own grad norm is above this (default 1e3).
    dead_fraction : float
        Dead units when more than this fraction of an output is exactly 0 (default 0.9).
    nonfinite_fraction : float
        Non-finite badge when more than this fraction is NaN / Inf (default 0: any).
    """

    vanishing_abs: float = 1e-7
    vanishing_rel: float | None = 1e-7
    exploding: float = 1e3
    dead_fraction: float = 0.9
    nonfinite_fraction: float = 0.0
    kinds: tuple[str, ...] = field(default=BADGE_KINDS)


def _step(step: int | None) -> int:
    return -1 if step is None else int(step)


def _at(step: int | None) -> str:
    return "in a probe batch" if step is None or step < 0 else f"at step {step}"


def grad_badges(norms: GradNorms, thresholds: HealthThresholds | None = None) -> dict[str, list[Badge]]:
    """Gradient badges per module, from the norm of the parameters each module owns.

    A module is judged on its own parameters (``recurse=False``), so a bad layer
    is badged and its parents are not. Frozen parameters have no norm and are
    never badged.

    Parameters
    ----------
    norms : GradNorms
        From :func:`workbench.core.probe.gradients.grad_norms`.
    thresholds : HealthThresholds, optional

    Returns
    -------
    dict of str to list of Badge
        Keyed by qualified module name; only modules with a badge appear.
    """
    th = thresholds or HealthThresholds()
    step = _step(norms.step)
    g = norms.global_norm
    out: dict[str, list[Badge]] = {}
    for name, value in norms.own.items():
        where = name or "model"
        badge = None
        if not math.isfinite(value):
            if "nonfinite" in th.kinds:
                badge = Badge("nonfinite", value, step, f"{where}: non-finite gradient ({value}) {_at(step)}")
        elif value > th.exploding and "exploding_grad" in th.kinds:
            badge = Badge(
                "exploding_grad", value, step,
                f"{where}: exploding gradient, norm {value:.3g} > {th.exploding:g} {_at(step)}",
            )
        elif "vanishing_grad" in th.kinds and (
            value < th.vanishing_abs
            or (th.vanishing_rel is not None and math.isfinite(g) and g > 0 and value / g < th.vanishing_rel)
        ):
            badge = Badge(
                "vanishing_grad", value, step,
                f"{where}: vanishing gradient, norm {value:.3g} (global {g:.3g}) {_at(step)}",
            )
        if badge is not None:
            out.setdefault(name, []).append(badge)
    return out


def activation_badges(
    stats: Mapping[str, ActivationStats] | Iterable[ActivationStats], thresholds: HealthThresholds | None = None
) -> dict[str, list[Badge]]:
    """Dead-unit and non-finite badges per probed module, from its output statistics.

    Parameters
    ----------
    stats : mapping or iterable of ActivationStats
        From :meth:`workbench.core.probe.activations.ActivationProbe.collect` or
        :func:`workbench.core.probe.activations.probe_batch`.
    thresholds : HealthThresholds, optional

    Returns
    -------
    dict of str to list of Badge
        Keyed by qualified module name (a tuple output's leaves badge their module once per kind).
    """
    th = thresholds or HealthThresholds()
    values = stats.values() if isinstance(stats, Mapping) else stats
    out: dict[str, list[Badge]] = {}
    for s in values:
        step = _step(s.step)
        found = []
        if "dead_units" in th.kinds and s.zero_fraction > th.dead_fraction:
            found.append(Badge(
                "dead_units", s.zero_fraction, step,
                f"{s.label or 'model'}: dead units, {s.zero_fraction:.1%} of the output is exactly 0 {_at(step)}",
            ))
        if "nonfinite" in th.kinds and s.nonfinite_fraction > th.nonfinite_fraction:
            found.append(Badge(
                "nonfinite", s.nonfinite_fraction, step,
                f"{s.label or 'model'}: {s.nonfinite_fraction:.1%} of the output is NaN/Inf {_at(step)}",
            ))
        badges = out.setdefault(s.module, [])
        for b in found:
            if all(old.kind != b.kind for old in badges):
                badges.append(b)
    return {k: v for k, v in out.items() if v}


def layer_badges(snapshot, thresholds: HealthThresholds | None = None) -> dict[str, list[Badge]]:
    """Dead-unit and non-finite badges for every leaf module of a layer snapshot.

    Parameters
    ----------
    snapshot : workbench.core.probe.layer_stats.LayerSnapshot
        Its ``act_zeros`` column (share of exact zeros) and ``act_mean`` (non-finite
        when the output holds NaN / Inf).
    thresholds : HealthThresholds, optional

    Returns
    -------
    dict of str to list of Badge
        Keyed by qualified module name; only modules with a badge appear.
    """
    th = thresholds or HealthThresholds()
    step = _step(snapshot.step)
    zeros, means = snapshot.column("act_zeros"), snapshot.column("act_mean")
    out: dict[str, list[Badge]] = {}
    for name, z, m in zip(snapshot.names, zeros.tolist(), means.tolist()):
        found = []
        if "dead_units" in th.kinds and z > th.dead_fraction:
            found.append(Badge("dead_units", z, step,
                               f"{name}: dead units, {z:.1%} of the output is exactly 0 {_at(step)}"))
        if "nonfinite" in th.kinds and (math.isinf(m) or (math.isnan(m) and not math.isnan(z))):
            found.append(Badge("nonfinite", 1.0, step, f"{name}: the output holds NaN/Inf {_at(step)}"))
        if found:
            out[name] = found
    return out


def with_onsets(badges: dict[str, list[Badge]], onsets: dict[tuple[str, str], int]) -> dict[str, list[Badge]]:
    """Copies of ``badges`` with ``since`` set from ``onsets`` (updated in place), said in the hover text.

    ``onsets`` maps ``(module, kind)`` to the step a badge first appeared in an
    unbroken run of measurements; a badge that is absent from ``badges`` ends its
    run (the key is dropped). Call once per measurement, in step order.
    """
    present = {(name, b.kind) for name, bs in badges.items() for b in bs}
    for key in [k for k in onsets if k not in present]:
        del onsets[key]
    out: dict[str, list[Badge]] = {}
    for name, bs in badges.items():
        for b in bs:
            since = onsets.setdefault((name, b.kind), b.step)
            text = f"{b.text} (since step {since:,})" if 0 <= since < b.step else b.text
            out.setdefault(name, []).append(dataclasses.replace(b, since=since, text=text))
    return out


def merge_badges(*parts: Mapping[str, list[Badge]]) -> dict[str, list[Badge]]:
    """Union of badge dicts; for one module and kind the later part wins."""
    out: dict[str, dict[str, Badge]] = {}
    for part in parts:
        for name, badges in part.items():
            for b in badges:
                out.setdefault(name, {})[b.kind] = b
    return {name: list(kinds.values()) for name, kinds in out.items() if kinds}


def check_health(
    activations: Mapping[str, ActivationStats] | None = None,
    grads: GradNorms | None = None,
    thresholds: HealthThresholds | None = None,
) -> dict[str, list[Badge]]:
    """All badges for one measurement: ``merge_badges(activation_badges(...), grad_badges(...))``."""
    parts = []
    if activations:
        parts.append(activation_badges(activations, thresholds))
    if grads is not None:
        parts.append(grad_badges(grads, thresholds))
    return merge_badges(*parts)
