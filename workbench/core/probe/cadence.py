"""When the live probes measure, said in words, and when their samples are too sparse for a line.

:class:`CadencePlan` is what a :class:`~workbench.core.probe.callback.ProbeCallback`
knows after a step: the step of its next full measurement, the cadence in
force and why (a time budget, the user's "every N steps", or the start value
while a measurement's cost is still unknown). It travels to the window inside
:class:`~workbench.core.probe.callback.ProbeReport` (plain data) and
:func:`describe_plan` / :func:`describe_setting` turn it into the Probes panel's
line. :func:`sparse` decides whether a series of measurements is drawn as
markers (a line between two measurements far apart reads as a trend nobody
measured). No Qt here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["CadencePlan", "describe_plan", "describe_setting", "sparse", "SPARSE_POINTS", "SPARSE_GAP"]

#: A series with fewer points than this is drawn as markers.
SPARSE_POINTS = 20
#: ... and so is one where two neighbours lie further apart than this share of its x extent.
SPARSE_GAP = 0.1


@dataclass(frozen=True)
class CadencePlan:
    """The probes' plan after a step (global steps, as the loss plot counts them).

    Attributes
    ----------
    step : int
        The step the plan was made after.
    next_step : int
        The step of the next full measurement (activations, gradients, layer statistics).
    every : int
        Steps between full measurements in force now.
    mode : str
        ``"budget"`` (the cadence follows the time budget), ``"learning"`` (budget
        mode before a measurement's cost is known: the start cadence) or
        ``"fixed"`` (every N steps, as the user set it).
    budget : float
        The largest share of training time the probes may take (0.02 = 2 %).
    measure_ms : float
        What a full measurement costs beyond a plain step, ms (NaN until known).
    step_ms : float
        A plain step's wall time, ms (NaN until known).
    last_step : int or None
        The step the run ends at when it completes (None when unknown).
    epoch_end_step : int or None
        The next epoch's last step: gradient norms are measured there (and at the
        run's last step) whatever the cadence; None when the run has no epochs.
    """

    step: int
    next_step: int
    every: int
    mode: str
    budget: float
    measure_ms: float = math.nan
    step_ms: float = math.nan
    last_step: int | None = None
    epoch_end_step: int | None = None


def _pct(budget: float) -> str:
    return f"{budget * 100:.3g} %"


def _ms(value: float) -> str:
    return f"{value:.2g} ms" if value < 10 else f"{value:,.0f} ms"


def describe_plan(plan: CadencePlan) -> str:
    """One line: when the next full measurement is due and why, e.g.
    ``"next at step ~140: every ~40 steps keeps probes within the 2 % budget (a measurement ~18 ms, a step ~7 ms)"``.

    The budget cadence is approximate (``~``): it follows the measured costs. A
    next measurement past the run's last step says so and what to change.
    """
    costs = ""
    if math.isfinite(plan.measure_ms) and math.isfinite(plan.step_ms):
        costs = f" (a measurement ~{_ms(plan.measure_ms)}, a step ~{_ms(plan.step_ms)})"
    if plan.mode == "fixed":
        text = f"next at step {plan.next_step:,}: every {plan.every:,} steps, as set"
    elif plan.mode == "learning":
        text = (f"next at step ~{plan.next_step:,}: every {plan.every:,} steps until a measurement's cost is known "
                f"({_pct(plan.budget)} budget)")
    elif plan.last_step is not None and plan.next_step > plan.last_step:
        text = (f"no other full measurement before the run ends at step {plan.last_step:,}: the {_pct(plan.budget)} "
                f"budget is used up until step ~{plan.next_step:,}{costs}; raise it or choose every N steps")
    else:
        text = (f"next at step ~{plan.next_step:,}: every ~{plan.every:,} steps keeps probes within the "
                f"{_pct(plan.budget)} budget{costs}")
    if plan.epoch_end_step is not None:
        text += "; gradient norms also at epoch ends and the last step"
    return text


def describe_setting(every: int | None, budget: float) -> str:
    """What a cadence setting will do in the next run (before a run has measured anything)."""
    how = (f"every {int(every):,} steps" if every is not None
           else f"as often as {_pct(budget)} of the training time allows")
    return f"Live during training: the first step, then {how}; gradient norms also at epoch ends and the last step."


def sparse(x: np.ndarray, min_points: int = SPARSE_POINTS, max_gap: float = SPARSE_GAP) -> bool:
    """True when samples at positions ``x`` (ascending) are too sparse to join with a line.

    Sparse: fewer than ``min_points``, or two neighbours further apart than
    ``max_gap`` of the whole extent (a run measured at its start and end only).
    """
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size < min_points:
        return True
    span = float(x[-1] - x[0])
    return span > 0 and float(np.max(np.diff(x))) > max_gap * span
