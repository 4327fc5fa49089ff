"""Live probes during training: a :class:`~workbench.core.train.trainer.hooks.Callback`.

:class:`ProbeCallback` measures at the first step, then as often as a time budget
allows (or every ``every``-th step when the user sets a number):

* activation statistics of the probed modules (forward hooks attached only for
  the measured step's forward, so the other steps run hook-free);
* gradient norms of every parameter (bulk, one host sync), per-module aggregates
  and the global norm, every ``grad_every``-th step (default: the same cadence);
* the update ratio ``||dw|| / ||w||`` over the measured step;
* optional weight histograms of chosen parameters;
* every leaf module's layer statistics (:mod:`workbench.core.probe.layer_stats`:
  activation mean / std / zero share / saturated share, own grad norm, update
  ratio) as one :class:`~workbench.core.probe.layer_stats.LayerSnapshot`, for the
  layer x time heatmaps;
* health badges from all of the above, each with the step since which it holds.

Whatever the cadence, the gradient norms (one bulk reduction, no hooks: ~0.1 ms
for the demo CNN, charged to the budget) are also measured at every epoch's last
step and at a step after which the run stops, so that even a short run has a
curve; the full measurements keep the budget law. Each report carries the
:class:`~workbench.core.probe.cadence.CadencePlan` made after its step: when the
next full measurement is due and why, for the Probes panel to say.
:meth:`ProbeCallback.set_cadence` changes the cadence during a run.

The results travel as :class:`ProbeReport` objects holding only floats and numpy
arrays. They are handed to ``sink(list[ProbeReport])`` from the training thread,
batched (at most one call per ``flush_ms``, and once at the end of the fit), so
a Qt sink can emit one queued signal per call without flooding the event loop.

Changing which modules are probed while the trainer runs goes through
:meth:`ProbeCallback.set_probed`, which only records the wish; the hooks are
changed on the training thread at the next step boundary (DESIGN.md threading
contract).

Hook points used: ``on_fit_start``, ``on_after_backward`` (gradients before
clipping, the optimizer step and ``zero_grad``; used when the trainer calls it),
``on_step_end`` (fallback for gradients when ``on_after_backward`` was not
called: valid because gradients survive until the next step's ``zero_grad``),
``on_fit_end``. No Qt here.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from torch import nn

from workbench.core.probe.activations import ActivationProbe, ActivationStats, model_device
from workbench.core.probe.cadence import CadencePlan
from workbench.core.probe.gradients import GradNorms, UpdateTracker, grad_norms, update_ratio, weight_histograms
from workbench.core.probe.health import (
    Badge,
    HealthThresholds,
    activation_badges,
    grad_badges,
    layer_badges,
    merge_badges,
    with_onsets,
)
from workbench.core.probe.layer_stats import LayerSnapshot, LayerStatsProbe, layer_snapshot
from workbench.core.probe.stats import Histogram
from workbench.core.train.trainer.hooks import Callback

__all__ = ["ProbeCallback", "ProbeReport"]


@dataclass
class ProbeReport:
    """What one measured training step produced (CPU data only).

    Attributes
    ----------
    step : int
        The trainer's global step of the measurement.
    activations : dict of str to ActivationStats
        Empty on steps that measured gradients only.
    grads : GradNorms or None
        None on steps that measured activations only.
    update_ratios : dict of str to float
        Parameter name -> ``||dw|| / ||w||`` over this step (empty when not tracked).
    weight_histograms : dict of str to Histogram
        For the parameters named in ``ProbeCallback(weight_hist=...)``.
    badges : dict of str to list of Badge
        Module name -> the current badges (latest activation badges merged with
        the latest gradient badges), each with ``since``: the first step of the
        unbroken run of measurements that raised it.
    layers : LayerSnapshot or None
        Every leaf module's statistics (on activation steps with ``layers=True``).
    cadence : CadencePlan or None
        The plan made after this step: the next full measurement and why. A
        report with nothing but a plan (no activations, no grads) says that the
        cadence changed (:meth:`ProbeCallback.set_cadence`).
    """

    step: int
    activations: dict[str, ActivationStats] = field(default_factory=dict)
    grads: GradNorms | None = None
    update_ratios: dict[str, float] = field(default_factory=dict)
    weight_histograms: dict[str, Histogram] = field(default_factory=dict)
    badges: dict[str, list[Badge]] = field(default_factory=dict)
    layers: LayerSnapshot | None = None
    cadence: CadencePlan | None = None


class ProbeCallback(Callback):
    """Probe activations and gradients every N training steps and hand the results to a sink.

    Parameters
    ----------
    sink : callable
        ``sink(reports: list[ProbeReport])``, called on the training thread.
    every : int or None
        Measure activations (and the update ratio) on steps ``0, every, 2*every, ...``
        counted from the start of the fit. None (the default) adapts the cadence
        to a time budget: it measures step 0, learns what a measurement costs (the
        probes' own time on the training thread, or how much longer a measured step
        takes than a plain one when that is more), and spaces the next ones so that
        all of them together, counted from the start of the fit, cost at most
        ``budget`` of the training time (the demo CNN on 2 CPU cores, ~9 ms per
        measurement next to ~10 ms steps: the next one near step 90, then one every
        ~45 steps; a heavier model, where a measurement is cheap next to a step, is
        measured more often, down to every step). Until a cost is known, every 10th step.
        Either way, gradient norms are also measured at every epoch's last step and
        at the step a run stops after (cheap: no hooks).
    grad_every : int or None
        Cadence of gradient norms (default: on the measured steps; 1 = every step).
    budget : float
        With ``every=None``: the largest share of training time the probes may
        take, over the fit so far (0.02 = 2 %; with the callback's fixed per-step
        cost, well under 1 %, the default keeps a probed run at >= 0.97x the speed
        of an unprobed one).
    probed : iterable of str
        Qualified names of the modules to probe at the start.
    track_updates : bool
        Measure ``||dw|| / ||w||`` on activation steps (copies the trainable weights once per measurement).
    weight_hist : iterable of str
        Parameter names whose weight histogram is sent on activation steps.
    thresholds : HealthThresholds, optional
        Badge thresholds.
    layers : bool
        Measure every leaf module's layer statistics on activation steps (forward
        hooks on all leaves for those steps only; part of the cadence's budget).
    tb_histogram_budget : float
        With a TensorBoard log (``trainer.tensorboard``): the probed modules'
        weight and gradient histograms are written on a measured step while the
        time spent on them stays within this share of the fit's wall time (a
        histogram costs about 4 ms, 300 scalars' worth: on every step they made a
        probed demo run 12x slower).
    flush_ms : float
        Minimum time between two sink calls, in milliseconds (0: one call per report). The
        default, 250, matches the metric batches of a run the window started: each call wakes
        the window's GUI thread, which redraws once per call. An epoch's last step, an epoch
        end, a pause and the fit's end hand over what is held at once.
    **probe_kwargs
        Passed to :class:`~workbench.core.probe.activations.ActivationProbe` (``bins``, ``images``, ...).

    Raises
    ------
    ValueError
        ``every`` or ``grad_every`` below 1.
    """

    def __init__(
        self,
        sink: Callable[[list[ProbeReport]], None],
        *,
        every: int | None = None,
        grad_every: int | None = None,
        budget: float = 0.02,
        probed: Iterable[str] = (),
        track_updates: bool = True,
        weight_hist: Iterable[str] = (),
        thresholds: HealthThresholds | None = None,
        layers: bool = True,
        tb_histogram_budget: float = 0.01,
        flush_ms: float = 250.0,
        **probe_kwargs,
    ):
        if (every is not None and every < 1) or (grad_every is not None and grad_every < 1):
            raise ValueError(f"probe cadence must be >= 1 step (every={every}, grad_every={grad_every})")
        self.sink = sink
        #: True when the cadence adapts to ``budget`` (``every=None``)
        self.auto = every is None
        self.budget = float(budget)
        #: the current activation cadence in steps (changes during a fit when ``auto``)
        self.every = AUTO_START_EVERY if every is None else int(every)
        self._fixed_every = self.every
        self.grad_every = None if grad_every is None else int(grad_every)
        self.track_updates = track_updates
        self.thresholds = thresholds or HealthThresholds()
        self.layers = bool(layers)
        self.tb_histogram_budget = float(tb_histogram_budget)
        self.flush_ms = float(flush_ms)
        self._probe_kwargs = probe_kwargs
        self._lock = threading.Lock()
        self._wanted: tuple[str, ...] = tuple(dict.fromkeys(probed))
        self._weight_hist: tuple[str, ...] = tuple(weight_hist)
        self._listeners: list[Callable[[str, tuple], None]] = []
        self._cadence_changed = False
        self._reset()

    def _reset(self) -> None:
        self._probe: ActivationProbe | None = None
        self._layer_probe: LayerStatsProbe | None = None
        self._writer = None  # the trainer's TensorBoard SummaryWriter, if any
        self._hist_time = 0.0  # seconds spent writing TensorBoard histograms in this fit
        self._hist_sets = 0
        self._fit_t0 = time.perf_counter()
        self._onsets: dict[tuple[str, str], int] = {}
        self._model: nn.Module | None = None
        self._on_cpu = True
        self._own_s = 0.0  # seconds the probes took on the training thread in the step under way
        self._updates = UpdateTracker()
        self._index = 0  # steps completed in this fit
        self._grads_step: int | None = None  # the index whose grads were measured in on_after_backward
        self._pending_grads: GradNorms | None = None
        self._act_badges: dict[str, list[Badge]] = {}
        self._grad_badges: dict[str, list[Badge]] = {}
        self._out: list[ProbeReport] = []
        self._last_flush = time.monotonic()
        self._next_act = 0  # index of the next step whose activations are measured
        self._last_act: int | None = None  # index of the last step whose activations were measured
        self.every = AUTO_START_EVERY if self.auto else self._fixed_every
        self._cadence = _StepCost()
        self._cadence_changed = False  # a new fit starts with the setting as it is
        self._epoch_steps: int | None = None  # steps per epoch of the trainer (None: it has no epochs)
        self._last_badges: dict[str, list[Badge]] = {}

    # -- commands from other threads -------------------------------------------------------
    def set_probed(self, names: Iterable[str]) -> None:
        """Probe exactly ``names`` from the next measured step on (thread-safe; applied on the training thread)."""
        with self._lock:
            self._wanted = tuple(dict.fromkeys(names))
        self._changed("set_probed", (self.probed(),))

    def set_cadence(self, every: int | None, budget: float | None = None) -> None:
        """Measure every ``every`` steps, or (``None``) as often as ``budget`` of the training time allows.

        Thread-safe: during a run the new cadence takes effect at the next step
        boundary, and the next report carries the new plan. A copy in a training
        process gets the same call (:meth:`add_listener`).

        Parameters
        ----------
        every : int or None
            Steps between full measurements (>= 1), or None for the budget.
        budget : float, optional
            The budget as a share of training time (0.02 = 2 %), in (0, 1];
            unchanged when omitted.

        Raises
        ------
        ValueError
            ``every`` below 1 or ``budget`` outside (0, 1].
        """
        if every is not None and int(every) < 1:
            raise ValueError(f"probe cadence must be >= 1 step (every={every})")
        if budget is not None and not 0 < float(budget) <= 1:
            raise ValueError(f"probe budget must be a share of the time in (0, 1] (budget={budget})")
        with self._lock:
            if budget is not None:
                self.budget = float(budget)
            self.auto = every is None
            if every is not None:
                self._fixed_every = int(every)
            self._cadence_changed = True
        self._changed("set_cadence", (None if every is None else int(every), self.budget))

    def cadence_setting(self) -> tuple[int | None, float]:
        """``(every, budget)``: ``every`` None when the cadence follows the budget."""
        return (None if self.auto else self._fixed_every), self.budget

    def probed(self) -> list[str]:
        """The module names that are (or will be, at the next step boundary) probed."""
        with self._lock:
            return list(self._wanted)

    def set_weight_histograms(self, names: Iterable[str]) -> None:
        """Parameters whose weight histograms are sent (thread-safe)."""
        with self._lock:
            self._weight_hist = tuple(names)
        self._changed("set_weight_histograms", (list(self._weight_hist),))

    def settings(self) -> dict:
        """The keyword arguments that build this callback again elsewhere (a training process), sink aside:
        ``ProbeCallback(sink, **settings())``.

        Plain, picklable data: cadence, budget, probed modules, weight histograms,
        thresholds and the activation-probe options.
        """
        with self._lock:
            probed, hist = list(self._wanted), list(self._weight_hist)
        return {"every": None if self.auto else self._fixed_every, "grad_every": self.grad_every,
                "budget": self.budget, "probed": probed, "track_updates": self.track_updates,
                "weight_hist": hist, "thresholds": self.thresholds, "layers": self.layers,
                "tb_histogram_budget": self.tb_histogram_budget, "flush_ms": self.flush_ms,
                **self._probe_kwargs}

    def add_listener(self, fn: Callable[[str, tuple], None]) -> None:
        """Call ``fn(method, args)`` after each :meth:`set_probed` / :meth:`set_weight_histograms`
        (``fn("set_probed", (names,))``): a copy in a training process makes the same call."""
        self._listeners.append(fn)

    def remove_listener(self, fn) -> None:
        """Stop calling ``fn`` (no error when it was not added)."""
        if fn in self._listeners:
            self._listeners.remove(fn)

    def _changed(self, method: str, args: tuple) -> None:
        for fn in list(self._listeners):
            fn(method, args)

    # -- trainer hooks ---------------------------------------------------------------------
    def on_fit_start(self, trainer) -> None:  # noqa: D102
        self._reset()
        self._model = trainer.model
        self._on_cpu = model_device(self._model).type == "cpu"
        self._writer = getattr(trainer, "tensorboard", None)
        self._probe = ActivationProbe(self._model, **self._probe_kwargs)
        self._layer_probe = LayerStatsProbe(self._model) if self.layers else None
        self._epoch_steps = _epoch_steps(trainer)
        self._prepare(0)

    def on_after_backward(self, trainer) -> None:
        """Gradients of the current step, before clipping / the optimizer step / ``zero_grad``."""
        if self._model is None or not (self._is_grad_step(self._index) or self._ends_epoch(trainer, pending=True)):
            return
        t0 = time.perf_counter()
        self._pending_grads = grad_norms(self._model, step=_trainer_step(trainer, self._index))
        self._grads_step = self._index
        if self._on_cpu:  # on CUDA its one read-back waits for the backward's kernels
            self._own_s += time.perf_counter() - t0

    def _own_time(self) -> float:
        """Seconds the probes took on the training thread since the last call (hooks, snapshot, reductions).

        On CUDA only the hooks' and the snapshot's host time count: the read-backs
        wait for the whole step's kernels, which the step's own time already holds.
        """
        own, self._own_s = self._own_s, 0.0
        for probe in (self._probe, self._layer_probe):
            if probe is not None:
                own += probe.busy_s
                probe.busy_s = 0.0
        return own

    def on_step_end(self, trainer, metrics: dict | None = None) -> None:  # noqa: D102
        if self._model is None:
            return
        i = self._index
        step = _step_of(trainer, metrics, i)
        full = self._is_act_step(i) or self._is_grad_step(i)
        ending = self._ends_epoch(trainer) or _stopping(trainer)
        forced = not full and ending  # gradient norms only
        t0 = time.perf_counter()
        report = self._measure(i, step, forced)
        if self._on_cpu:
            self._own_s += time.perf_counter() - t0
        if report is not None:
            self._out.append(report)
            if report.activations and self._writer is not None and self._histograms_due():
                t = time.perf_counter()
                self._write_histograms(step)
                self._hist_time += time.perf_counter() - t
        if self._is_act_step(i):
            self._last_act = i
        own = self._own_time()
        self._cadence.record(full, own)
        if forced:
            self._cadence.charge(own)  # a plain step's time, but the probes' share of it is theirs
        changed = self._take_cadence_change()
        self._plan_next(i)
        if report is not None or changed:
            plan = self._plan(trainer, i, step)
            if report is None:  # a new setting: say so now, not at the next measurement
                report = ProbeReport(step=step, badges=self._last_badges)
                self._out.append(report)
            report.cadence = plan
        self._index = i + 1
        t0 = time.perf_counter()
        self._prepare(self._index)
        self._own_s += time.perf_counter() - t0  # the weight snapshot for the next step, if measured
        if ending:
            self._flush()  # the epoch's (or the fit's) last step: its report does not wait out the validation
        else:
            self._maybe_flush()

    def _take_cadence_change(self) -> bool:
        """Apply a :meth:`set_cadence` made since the last step (on the training thread); True if there was one."""
        with self._lock:
            changed, self._cadence_changed = self._cadence_changed, False
        if changed and not self.auto:
            self.every = self._fixed_every
        return changed

    def _plan_next(self, i: int) -> None:
        """After step ``i``: the index of the next full measurement (:attr:`_next_act`), by the budget law."""
        if self.auto:
            self.every = self._cadence.cadence(self.budget, AUTO_START_EVERY)
        if self._last_act is None:
            return
        # from the last measurement, with the cadence known now: as soon as a plain step has been
        # timed, the next measurement moves (before, the second one came at AUTO_START_EVERY whatever
        # a measurement cost: 4 of the 5 in a 40-step resnet18 epoch on CPU, 10 % of its time)
        nxt = self._last_act + self.every
        if self.auto:  # and not before the measurements so far are paid for (step 0's included)
            due = self._cadence.steps_until_due(self.budget)
            if due is not None:
                nxt = max(nxt, i + due)
        self._next_act = max(nxt, i + 1)

    def _plan(self, trainer, i: int, step: int) -> CadencePlan:
        """The plan after step index ``i`` (global step ``step``), in global steps."""
        cost = self._cadence
        learning = self.auto and (math.isnan(cost.plain) or math.isnan(cost.extra))
        left = _steps_left(trainer, self._epoch_steps)
        end = self._next_epoch_end(trainer, i)
        return CadencePlan(
            step=step, next_step=step + (self._next_act - i), every=int(self.every),
            mode="fixed" if not self.auto else ("learning" if learning else "budget"), budget=self.budget,
            measure_ms=cost.extra * 1e3, step_ms=cost.plain * 1e3,
            last_step=None if left is None else step + left,
            epoch_end_step=None if end is None else step + (end - i))

    def _ends_epoch(self, trainer, pending: bool = False) -> bool:
        """Is the step under way (``pending``: before its ``batch_in_epoch`` count) its epoch's last?"""
        n = self._epoch_steps
        b = getattr(trainer, "batch_in_epoch", None)
        if not n or not isinstance(b, int):
            return False
        return b + (1 if pending else 0) == n

    def _next_epoch_end(self, trainer, i: int) -> int | None:
        """Index of the next epoch's last step after step index ``i`` (None without epochs)."""
        n = self._epoch_steps
        b = getattr(trainer, "batch_in_epoch", None)
        if not n or not isinstance(b, int):
            return None
        return i + (n - b if b < n else n)

    def on_epoch_end(self, trainer, metrics=None) -> None:  # noqa: D102
        self._cadence.skip()  # validation and checkpoints are not a step's time
        self._flush()

    def on_pause(self, trainer) -> None:  # noqa: D102
        self._cadence.skip()
        self._flush()  # what was measured before the pause is shown during it

    def on_fit_end(self, trainer, reason: str = "completed") -> None:  # noqa: D102
        if self._probe is not None:
            self._probe.close()
        if self._layer_probe is not None:
            self._layer_probe.detach()
            self._layer_probe = None
        self._updates.clear()
        self._flush()
        self._probe = None
        self._model = None

    def on_exception(self, trainer, exc, tb: str = "") -> None:  # noqa: D102
        if self._probe is not None:
            self._probe.close()  # never leave our hooks behind
        if self._layer_probe is not None:
            self._layer_probe.detach()

    # -- internals -------------------------------------------------------------------------
    def _prepare(self, index: int) -> None:
        """Before step ``index``: attach the hooks and snapshot weights if it is measured, else detach."""
        measured = self._is_act_step(index)
        if not measured and not self._probe.names and not (self._layer_probe and self._layer_probe.attached):
            return  # a plain step after a plain step: nothing attached, nothing to detach
        with self._lock:
            wanted = self._wanted
        names = [n for n in wanted if _has_module(self._model, n)] if measured else []
        self._probe.set_probed(names)
        if self._layer_probe is not None:
            if measured:
                self._layer_probe.attach(borrow=names)  # the probed modules are reduced once, by the probe
            else:
                self._layer_probe.detach()
        if measured and (self.track_updates or self._layer_probe is not None):
            self._updates.snapshot(self._model)

    def _is_act_step(self, i: int) -> bool:
        return i == self._next_act

    def _is_grad_step(self, i: int) -> bool:
        if self.grad_every is None:
            return self._is_act_step(i)
        return i % self.grad_every == 0

    def _measure(self, i: int, step: int, forced: bool = False) -> ProbeReport | None:
        """The report of step index ``i``, or None; ``forced``: gradient norms at least (an epoch end, a stop)."""
        acts_step = self._is_act_step(i)
        grads_step = self._is_grad_step(i) or forced
        if not (acts_step or grads_step):
            return None
        report = ProbeReport(step=step)
        if grads_step:
            if self._grads_step == i and self._pending_grads is not None:
                report.grads = self._pending_grads
                report.grads.step = step
            else:  # no on_after_backward from this trainer: grads survive until the next zero_grad
                report.grads = grad_norms(self._model, step=step)
            self._pending_grads = None
            self._grad_badges = grad_badges(report.grads, self.thresholds)
        if acts_step:
            report.activations = self._probe.collect(step=step)
            self._act_badges = activation_badges(report.activations, self.thresholds)
            norms = self._updates.norms(self._model) if self._updates.has_snapshot else {}
            if self.track_updates:
                report.update_ratios = {n: update_ratio(d, w) for n, (d, w) in norms.items()}
            if self._layer_probe is not None:
                names, acts = self._layer_probe.collect(borrowed=report.activations)
                report.layers = layer_snapshot(step, names, [self._layer_probe.type_of(n) for n in names], acts,
                                               report.grads.own if report.grads is not None else None, norms)
                self._act_badges = merge_badges(layer_badges(report.layers, self.thresholds), self._act_badges)
            with self._lock:
                hist_names = [n for n in self._weight_hist if n in dict(self._model.named_parameters())]
            if hist_names:
                report.weight_histograms = weight_histograms(self._model, hist_names, self._probe.bins)
        report.badges = with_onsets(merge_badges(self._act_badges, self._grad_badges), self._onsets)
        self._last_badges = report.badges
        return report

    def _histograms_due(self) -> bool:
        """Within budget after the next set? (A set's cost is estimated at 4 ms a tensor until one is timed.)"""
        with self._lock:
            n = len(self._wanted)
        estimate = self._hist_time / max(1, self._hist_sets) if self._hist_sets else 0.004 * 2 * max(1, n)
        due = self._hist_time + estimate <= self.tb_histogram_budget * (time.perf_counter() - self._fit_t0)
        if due:
            self._hist_sets += 1
        return due

    def _write_histograms(self, step: int) -> None:
        """The probed modules' weight and gradient histograms into the run's TensorBoard log."""
        with self._lock:
            probed = list(self._wanted)
        for module in probed:
            if not _has_module(self._model, module):
                continue
            for pname, p in self._model.get_submodule(module).named_parameters(recurse=False):
                full = f"{module}.{pname}" if module else pname
                self._writer.add_histogram(f"weights/{full}", p.detach().float().cpu(), step)
                if p.grad is not None:
                    self._writer.add_histogram(f"grads/{full}", p.grad.detach().float().cpu(), step)

    def _maybe_flush(self) -> None:
        now = time.monotonic()
        if self._out and (now - self._last_flush) * 1000.0 >= self.flush_ms:
            self._flush()

    def _flush(self) -> None:
        if not self._out:
            return
        out, self._out = self._out, []
        self._last_flush = time.monotonic()
        self.sink(out)


#: The cadence an adaptive ProbeCallback starts with (steps between measurements).
AUTO_START_EVERY = 10


class _StepCost:
    """Wall time per step, measured and plain, as exponential moving averages, and what measuring cost so far.

    Written here (not taken from a library) because the cadence is the product's
    own trade-off: how often to look inside versus how fast to train.

    Attributes
    ----------
    plain, measured : float
        Moving averages of a plain and a measured step's wall time, s (NaN until timed).
    elapsed : float
        Wall time of every timed step of the fit, s (epoch ends and pauses left out).
    spent : float
        What the measurements cost beyond plain steps, s: a timed one its own time
        minus :attr:`plain`, but at least the probes' own time in it (``own_s`` of
        :meth:`record`); an untimed one (the first step of a fit or an epoch, whose
        start is not known) the probes' own time.
    own : float
        Moving average of the probes' own time in a measured step, s (NaN until one is
        recorded): a floor for :attr:`extra`, since one step's time is too noisy to
        show a cost of about one step's jitter (a demo run in the window, 10 ms steps
        varying by as much, measured 4 steps in a row and then none for 75).
    """

    ALPHA = 0.2

    def __init__(self, clock=time.perf_counter):
        self.plain = math.nan
        self.measured = math.nan
        self.own = math.nan
        self.elapsed = 0.0
        self.spent = 0.0
        self._uncharged: list[tuple[float, float]] = []  # (dt, own_s) of measured steps timed before a plain one
        self._untimed = 0  # measured steps not charged yet because they had no time of their own
        self._last = None
        self._clock = clock  # seconds; tests pass their own

    @property
    def extra(self) -> float:
        """How much longer a measured step takes than a plain one, s: ``measured - plain``, at least
        :attr:`own` (>= 0; NaN until one of the two is known)."""
        diff = self.measured - self.plain  # NaN until both are timed
        if math.isnan(self.own):
            return math.nan if math.isnan(diff) else max(0.0, diff)
        return self.own if math.isnan(diff) else max(diff, self.own)

    def record(self, measured: bool, own_s: float = 0.0) -> None:
        """Close the step that just ended (time since the previous call).

        ``own_s``: seconds the probes themselves took in it on the training thread
        (hooks, weight snapshot, reductions; 0 when not known).
        """
        now = self._clock()
        if measured and own_s > 0:
            self.own = own_s if math.isnan(self.own) else self.own + self.ALPHA * (own_s - self.own)
        if self._last is not None:
            dt = now - self._last
            self.elapsed += dt
            attr = "measured" if measured else "plain"
            old = getattr(self, attr)
            setattr(self, attr, dt if math.isnan(old) else old + self.ALPHA * (dt - old))
            if measured:
                self._uncharged.append((dt, own_s))
        elif measured and own_s > 0:
            self.spent += own_s
        elif measured:
            self._untimed += 1
        self._last = now
        if not math.isnan(self.plain):
            self.spent += sum(max(dt - self.plain, own, 0.0) for dt, own in self._uncharged)
            self._uncharged.clear()
            if self._untimed and not math.isnan(self.extra):
                self.spent += self._untimed * self.extra
                self._untimed = 0

    def charge(self, seconds: float) -> None:
        """Count ``seconds`` of probe work outside a measured step (gradient norms at an epoch end) as spent."""
        self.spent += max(0.0, float(seconds))

    def steps_until_due(self, budget: float) -> int | None:
        """Steps from now until one more measurement keeps all of them within ``budget`` of the time.

        With ``debt = spent + extra - budget * elapsed`` (s), the next measurement may
        come once ``debt / (budget * plain)`` more plain steps have run: 1 when the
        measurements so far are paid for, clamped to 1..1000 like :meth:`cadence`.
        None while no plain step has been timed or :attr:`extra` is not known (or ``budget <= 0``).
        """
        if math.isnan(self.plain) or math.isnan(self.extra) or self.plain <= 0 or budget <= 0:
            return None
        debt = self.spent + self.extra - budget * self.elapsed
        return int(min(1000, max(1, math.ceil(debt / (budget * self.plain)))))

    def skip(self) -> None:
        """The time until the next step is not a step's (validation and checkpoints at an epoch end,
        a pause): the next :meth:`record` only starts the clock. Counted, an epoch end made a plain
        step look ~8x longer and the cadence measure ~3x as often as its budget allows."""
        self._last = None

    def cadence(self, budget: float, default: int) -> int:
        """Steps between measurements so that they cost at most ``budget`` of training time.

        A measured step costs :attr:`extra` seconds more; one every N steps costs
        ``extra / (N * plain)`` of the time, so N = ceil(extra / (budget * plain)),
        clamped to 1..1000. ``default`` until both are known.
        """
        if math.isnan(self.plain) or math.isnan(self.extra) or self.plain <= 0:
            return default
        return int(min(1000, max(1, math.ceil(self.extra / (budget * self.plain)))))


def _has_module(model: nn.Module, name: str) -> bool:
    try:
        model.get_submodule(name)
    except AttributeError:
        return False
    return True


def _trainer_step(trainer, default: int) -> int:
    state = getattr(trainer, "state", None)
    step = getattr(state, "step", None)
    return int(step) if isinstance(step, int) else default


def _step_of(trainer, metrics: dict | None, default: int) -> int:
    """The global step of the step that just ended: ``metrics["step"]``, else the trainer's state."""
    if metrics and isinstance(metrics.get("step"), (int, float)):
        return int(metrics["step"])
    return _trainer_step(trainer, default)


def _epoch_steps(trainer) -> int | None:
    """Steps per epoch of ``trainer`` (``len(train_loader)``), or None when it has no epochs to count."""
    loader = getattr(trainer, "train_loader", None)
    if loader is None or not isinstance(getattr(trainer, "batch_in_epoch", None), int):
        return None
    try:
        n = len(loader)
    except TypeError:  # an iterable dataset of unknown length
        return None
    return int(n) if n > 0 else None


def _steps_left(trainer, per_epoch: int | None) -> int | None:
    """Steps after the one that just ended until the run completes (None when unknown)."""
    epochs = getattr(getattr(trainer, "config", None), "epochs", None)
    epoch = getattr(trainer, "epoch", None)
    done = getattr(trainer, "batch_in_epoch", None)
    if not per_epoch or not all(isinstance(v, int) for v in (epochs, epoch, done)):
        return None
    return max(0, (epochs - epoch) * per_epoch - done)


def _stopping(trainer) -> bool:
    """True when the run stops after the step that just ended (Stop pressed, Ctrl-C)."""
    try:
        return bool(getattr(trainer, "stop_agreed", False))
    except Exception:  # noqa: BLE001 - a trainer without a control: never stopping early
        return False
