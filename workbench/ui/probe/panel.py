"""The Probes dock: activation histograms, feature maps, gradient norms, health badges.

``ProbesPanel(window)`` shows what :mod:`workbench.core.probe.activations`,
:mod:`workbench.core.probe.gradients` and :mod:`workbench.core.probe.health` produced; it
computes no statistic itself. Results come from two sources:

* **Run probe batch**: one forward pass in ``eval()`` / ``torch.no_grad()`` on a
  :class:`~workbench.ui.probe.worker.ProbeBatchWorker` QThread, on random data of
  ``window.input_shape`` or on the first samples of the training dataset;
* **live during training**: :meth:`ProbesPanel.training_callback` returns the
  :class:`~workbench.core.probe.callback.ProbeCallback` to add to the Trainer's
  callbacks; its sink emits :attr:`ProbesPanel.reportsArrived` from the training
  thread, delivered to the GUI thread as a queued call (batched, 4 a second at most: ``flush_ms``).

The Weights tab (:class:`~workbench.ui.probe.weights_view.WeightsView`) draws the
weight histogram of one chosen parameter (the probed modules' parameters, or a
parameter row selected in the model tree): live on measured training steps
(``ProbeCallback.set_weight_histograms``), after a probe batch (computed on the
probe worker) and, when idle, as soon as it is chosen. The Gradients and Weights
tabs draw only while they can be seen; one that another tab covers draws the
newest results when it is shown (:class:`~workbench.ui.draw_when_shown.DrawWhenShown`).

The cadence row says when the live probes measure next and why (the
:class:`~workbench.core.probe.cadence.CadencePlan` of the latest report, in the
words of :func:`~workbench.core.probe.cadence.describe_plan`) and lets the user
choose a time budget or every N steps (``ProbeCallback.set_cadence``: applied at
the next step of a running run, in a training process too).

objectNames: ``probesPanel``, ``activationHistogram``, ``featureMapView``,
``gradNormPlot`` (``gradNormCurves`` + ``gradNormBars``), ``updateRatioPlot``,
``weightParamCombo``, ``weightHistogram``, ``runProbeButton``, ``probedList``, ``probeStats``,
``probeCadenceCombo``, ``probeBudgetSpin``, ``probeEverySpin``, ``probeCadenceLabel``.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QThread, Signal, Slot
from PySide6.QtWidgets import (
    QBoxLayout,
    QComboBox,
    QDoubleSpinBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from workbench.core.model.skeleton import is_skeleton
from workbench.core.model.example_input import default_input_shape
from workbench.core.probe.activations import ActivationStats, dataset_batch, random_input
from workbench.core.probe.cadence import CadencePlan, describe_plan, describe_setting
from workbench.core.probe.callback import ProbeCallback, ProbeReport
from workbench.core.probe.gradients import weight_histograms
from workbench.core.probe.health import merge_badges
from workbench.ui.probe.grad_norms_view import GradNormsView
from workbench.ui.probe.layer_heatmap_view import LayerHeatmapView
from workbench.ui.probe.weights_view import WeightsView
from workbench.ui.probe.worker import ProbeBatchWorker
from workbench.ui.session import Session
from workbench.ui.threading import start_in_thread, wait_for

SOURCE_RANDOM = "Random data (input shape)"
SOURCE_DATASET = "Training dataset (first samples)"
CADENCE_BUDGET = "Time budget"
CADENCE_EVERY = "Every N steps"
#: Title size of the activation histogram and feature maps (their tab is narrow beside the tree).
TITLE_SIZE = "9pt"
#: Least height of the activation histogram, in pixels: a shorter tab scrolls (its count ticks stay apart).
MIN_PLOT_HEIGHT = 140
#: Least height of the feature maps, in pixels: a 4 x 4 grid of channels stays readable.
MIN_MAP_HEIGHT = 200
#: Below this width of the Activations page, in pixels, its two plots are stacked instead of side by side.
SIDE_BY_SIDE_MIN_WIDTH = 560


def _fmt(v: float) -> str:
    return "nan" if not math.isfinite(v) else f"{v:.4g}"


def stats_text(s: ActivationStats) -> str:
    """The text block shown under the plots for one probed tensor."""
    shape = "×".join(str(d) for d in s.shape)
    where = "probe batch" if s.step is None else f"step {s.step}"
    return (
        f"<b>{s.label}</b> &nbsp; ({shape}, {s.dtype}, {where})<br>"
        f"mean {_fmt(s.mean)} &nbsp; std {_fmt(s.std)} &nbsp; min {_fmt(s.min)} &nbsp; max {_fmt(s.max)}<br>"
        f"exact zeros {s.zero_fraction:.1%} &nbsp; non-finite {s.nonfinite_fraction:.1%}"
    )


class _StatusLabel(QLabel):
    """A word-wrapped status line that takes no room while it has nothing to say."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.setWordWrap(True)
        self.setVisible(False)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt override
        """Show ``text``; an empty text hides the line."""
        super().setText(text)
        self.setVisible(bool(text))


class _ActivationsPage(QWidget):
    """The Activations tab's page: histogram and feature maps side by side, stacked when narrow.

    The plots keep :data:`MIN_PLOT_HEIGHT` / :data:`MIN_MAP_HEIGHT`; in a short tab the page scrolls
    (:class:`ScrollingTabs`) instead of squashing them.
    """

    def __init__(self, plots: QBoxLayout, parent: QWidget | None = None):
        super().__init__(parent)
        self._plots = plots

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Stack the plots below :data:`SIDE_BY_SIDE_MIN_WIDTH` pixels, else put them side by side."""
        wide = event.size().width() >= SIDE_BY_SIDE_MIN_WIDTH
        direction = QBoxLayout.Direction.LeftToRight if wide else QBoxLayout.Direction.TopToBottom
        if self._plots.direction() != direction:
            self._plots.setDirection(direction)
        super().resizeEvent(event)


class ScrollingTabs(QTabWidget):
    """A QTabWidget whose pages scroll when the dock is smaller than a page's minimum size.

    A page with a wide tool row (the Layers heatmap's) then no longer sets the
    minimum width of the whole Probes dock, so the dock fits beside the model
    tree on a laptop. :meth:`addTab`, :meth:`indexOf`, :meth:`widget`,
    :meth:`currentWidget` and :meth:`setCurrentWidget` speak of the pages
    themselves, not of their scroll areas.
    """

    def addTab(self, page: QWidget, label: str) -> int:  # noqa: N802 - Qt override
        """Add ``page`` inside a frameless scroll area; returns its index."""
        scroll = QScrollArea(objectName=f"{page.objectName() or 'probePage'}Scroll")
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidgetResizable(True)
        scroll.setWidget(page)
        return super().addTab(scroll, label)

    def widget(self, index: int) -> QWidget | None:
        """The page at ``index`` (not its scroll area)."""
        scroll = super().widget(index)
        return scroll.widget() if isinstance(scroll, QScrollArea) else scroll

    def indexOf(self, page: QWidget) -> int:  # noqa: N802 - Qt override
        """Index of ``page`` (or of its scroll area), -1 when it is not a tab."""
        for index in range(self.count()):
            if self.widget(index) is page or super().widget(index) is page:
                return index
        return -1

    def currentWidget(self) -> QWidget | None:  # noqa: N802 - Qt override
        """The page shown."""
        return self.widget(self.currentIndex())

    def setCurrentWidget(self, page: QWidget) -> None:  # noqa: N802 - Qt override
        """Show ``page``."""
        index = self.indexOf(page)
        if index >= 0:
            self.setCurrentIndex(index)


class ProbesPanel(QWidget):
    """Probe controls and plots for ``session.model``.

    Parameters
    ----------
    session : Session
        The model, its ``input_shape`` (e.g. ``(1, 1, 8, 8)``), whether a run
        owns it, the training settings' dataset (``data_config()``), the tree's
        selection; the panel sets ``badges`` and ``probed`` on it and registers
        its live callback for every run.
    parent : QWidget, optional

    Signals
    -------
    reportsArrived(list)
        Live :class:`~workbench.core.probe.callback.ProbeReport` batches (emitted on the training thread).
    probesChanged(list)
        The probed module names changed.
    resultsShown()
        New results arrived and the visible tabs drew them (a probe batch finished or live reports arrived).
    heatmapMaximizeRequested(bool)
        The Layers heatmap's Maximize: the Probes dock wants the whole window (True) or its place back (False);
        the window answers with :meth:`set_heatmap_maximized`.
    """

    reportsArrived = Signal(list)
    heatmapMaximizeRequested = Signal(bool)
    probesChanged = Signal(list)
    resultsShown = Signal()

    def __init__(self, session: Session, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("probesPanel")
        self.session = session
        self._probed: list[str] = []
        self._stats: dict[str, ActivationStats] = {}
        self._act_badges: dict = {}
        self._grad_badges: dict = {}
        self._thread: QThread | None = None
        self._worker: ProbeBatchWorker | None = None
        self._callback = ProbeCallback(self.reportsArrived.emit, probed=())
        self.reportsArrived.connect(self._on_reports)
        self._build()
        self._update_buttons()
        session.selectionChanged.connect(self._on_tree_node_changed)
        session.modelChanged.connect(self.on_model_changed)
        session.probeToggleRequested.connect(self.toggle_probe)
        session.revealRequested.connect(self.reveal)
        session.add_callback_provider(self.training_callbacks)
        self.reportsArrived.connect(session.probeReports)
        self._refresh_weight_params()

    # ------------------------------------------------------------------ building
    def _build(self) -> None:
        self.source_combo = QComboBox(objectName="probeSourceCombo")
        self.source_combo.addItems([SOURCE_RANDOM, SOURCE_DATASET])
        self.batch_spin = QSpinBox(objectName="probeBatchSize", minimum=1, maximum=1024, value=8)
        self.batch_spin.setToolTip("Samples in the probe batch (the N of (N, C, H, W))")
        self.run_button = QPushButton("Run probe batch", objectName="runProbeButton")
        self.run_button.setToolTip("One forward pass in eval() mode without gradients, off the GUI thread")
        self.run_button.clicked.connect(self.run_probe_batch)
        # the source names elide in a narrow dock (the full name is in the list and the tooltip)
        self.source_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.source_combo.setMinimumContentsLength(12)
        self.source_combo.setToolTip("Input of the probe batch: random data of the input shape, or the first "
                                     "samples of the training settings' dataset")
        self.status = _StatusLabel(objectName="probeStatus")
        top = QHBoxLayout()
        for w in (self.source_combo, QLabel("N"), self.batch_spin, self.run_button):
            top.addWidget(w)
        top.addStretch(1)
        cadence = self._build_cadence()

        self.probed_list = QListWidget(objectName="probedList")
        self.probed_list.setToolTip("Probed modules (toggle with the tree's context menu); Delete removes one")
        self.probed_list.currentItemChanged.connect(self._on_current_changed)
        self.remove_button = QPushButton("Remove probe", objectName="removeProbeButton")
        self.remove_button.clicked.connect(self._on_remove_clicked)
        left = QWidget()
        lv = QVBoxLayout(left)
        lv.setContentsMargins(0, 0, 0, 0)
        lv.addWidget(QLabel("Probed modules"))
        lv.addWidget(self.probed_list, 1)
        lv.addWidget(self.remove_button)

        self.tabs = ScrollingTabs(objectName="probeTabs")
        self.tabs.addTab(self._build_activations(), "Activations")
        self.grads = GradNormsView()
        self.tabs.addTab(self.grads, "Gradients")
        self.weights = WeightsView()
        self.weights.parameterChanged.connect(self._on_weight_param_changed)
        self.tabs.addTab(self.weights, "Weights")
        self.layers = LayerHeatmapView()
        self.layers.cellClicked.connect(self.session.reveal)
        self.layers.maximizeRequested.connect(self.heatmapMaximizeRequested)
        self.tabs.addTab(self.layers, "Layers")
        self._probed_column = left  # hidden while the heatmap has the window: its width goes to the steps

        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(left)
        split.addWidget(self.tabs)
        split.setStretchFactor(1, 4)
        split.setSizes([160, 640])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(4)
        layout.addLayout(top)
        layout.addWidget(self.status)
        layout.addLayout(cadence)
        layout.addWidget(split, 1)

    def set_heatmap_maximized(self, flag: bool) -> None:
        """The Layers heatmap has the window (``flag``: the Layers tab in front, the probed list aside) or not;
        its Maximize button follows without asking the window again."""
        if flag:
            self.tabs.setCurrentWidget(self.layers)
        self._probed_column.setVisible(not flag)
        self.layers.set_maximized(flag)

    def _build_cadence(self) -> QVBoxLayout:
        """The live cadence: a time budget or every N steps, and the line that says what it does."""
        every, budget = self._callback.cadence_setting()
        self.cadence_combo = QComboBox(objectName="probeCadenceCombo")
        self.cadence_combo.addItems([CADENCE_BUDGET, CADENCE_EVERY])
        self.cadence_combo.setCurrentText(CADENCE_EVERY if every is not None else CADENCE_BUDGET)
        self.cadence_combo.setToolTip("How often the live probes measure during a run: as often as a share of the "
                                      "training time allows, or every N steps. The first step, every epoch end "
                                      "and the last step always get gradient norms.")
        self.budget_spin = QDoubleSpinBox(objectName="probeBudgetSpin", minimum=0.1, maximum=100.0, decimals=1,
                                          singleStep=0.5, suffix=" %", value=budget * 100.0)
        self.budget_spin.setToolTip("The largest share of the training time the probes may take; the cadence "
                                    "follows what a measurement costs on this model and device")
        self.every_spin = QSpinBox(objectName="probeEverySpin", minimum=1, maximum=1_000_000, suffix=" steps",
                                   value=every or 10)
        self.every_spin.setToolTip("A full measurement (activations, gradients, layer statistics) every N steps, "
                                   "whatever it costs")
        for spin in (self.budget_spin, self.every_spin):
            spin.setKeyboardTracking(False)  # a typed number is applied once, on Enter or leaving the field
            spin.valueChanged.connect(self._on_cadence_changed)
        self.cadence_combo.currentIndexChanged.connect(self._on_cadence_changed)
        self.cadence_label = QLabel(objectName="probeCadenceLabel", wordWrap=True)
        self.cadence_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._plan: CadencePlan | None = None
        self._show_cadence_controls()
        self._show_setting()
        self.session.runningChanged.connect(self._on_running_changed)
        row = QHBoxLayout()
        row.addWidget(QLabel("Live probes:"))
        row.addWidget(self.cadence_combo)
        row.addWidget(self.budget_spin)
        row.addWidget(self.every_spin)
        row.addStretch(1)
        column = QVBoxLayout()  # the explanation under the controls, across the dock: fewer lines
        column.setSpacing(2)
        column.addLayout(row)
        column.addWidget(self.cadence_label)
        return column

    def _build_activations(self) -> QWidget:
        self.hist_plot = pg.PlotWidget()
        self.hist_plot.setTitle("Activation histogram", size=TITLE_SIZE)
        self.hist_plot.setObjectName("activationHistogram")
        self.hist_plot.setLabel("bottom", "value")
        self.hist_plot.setLabel("left", "count")
        self.hist_plot.getAxis("left").enableAutoSIPrefix(False)  # counts are whole numbers: no "(x0.001)"
        self.hist_bars = pg.BarGraphItem(x0=[0], x1=[1], height=[0], brush="#1f77b4", pen=None)
        self.hist_plot.addItem(self.hist_bars)

        self.map_plot = pg.PlotWidget()
        self.map_plot.setTitle("Feature maps", size=TITLE_SIZE)
        self.map_plot.setObjectName("featureMapView")
        self.map_plot.setAspectLocked(True)
        self.map_plot.invertY(True)
        self.map_plot.hideAxis("left")
        self.map_plot.hideAxis("bottom")
        self.map_image = pg.ImageItem(axisOrder="row-major")
        self.map_image.setColorMap(pg.colormap.get("viridis"))
        self.map_plot.addItem(self.map_image)

        self.leaf_combo = QComboBox(objectName="probeLeafCombo")
        self.leaf_combo.setToolTip("Tensor of a tuple / dict output")
        self.leaf_combo.currentTextChanged.connect(self._on_leaf_changed)
        self.stats_label = QLabel(objectName="probeStats", textFormat=Qt.TextFormat.RichText)
        self.stats_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.hist_plot.setMinimumHeight(MIN_PLOT_HEIGHT)
        self.map_plot.setMinimumHeight(MIN_MAP_HEIGHT)
        plots = QBoxLayout(QBoxLayout.Direction.TopToBottom)
        plots.addWidget(self.hist_plot, 1)
        plots.addWidget(self.map_plot, 1)
        page = _ActivationsPage(plots)
        page.setObjectName("activationsPage")
        v = QVBoxLayout(page)
        v.addLayout(plots, 1)
        row = QHBoxLayout()
        row.addWidget(self.stats_label, 1)
        row.addWidget(self.leaf_combo)
        v.addLayout(row)
        return page

    # ------------------------------------------------------------------ public API
    def probed(self) -> list[str]:
        """Qualified names of the probed modules, in the order they were added."""
        return list(self._probed)

    def has_probe(self, name: str) -> bool:
        """True when module ``name`` is probed."""
        return name in self._probed

    def toggle_probe(self, name: str) -> bool:
        """Probe module ``name`` if it is not probed, else unprobe it; return the new state.

        During a run the change is queued on the training callback (applied at the next step boundary).

        Raises
        ------
        KeyError
            ``name`` is not a submodule of ``window.model``.
        """
        if name in self._probed:
            self._probed.remove(name)
            self._after_probes_changed()
            return False
        model = self.session.model
        if model is None:
            raise KeyError(f"no model to probe {name!r} in")
        try:
            model.get_submodule(name)
        except AttributeError as exc:
            raise KeyError(f"no module named {name!r} in {type(model).__name__}") from exc
        self._probed.append(name)
        self._after_probes_changed()
        return True

    def reveal(self, name: str, step: int = -1) -> None:
        """Show module ``name``: probe it (from the next measured step during a run) and select it in the list.

        ``step`` is where it was asked from (a heatmap cell); the detailed
        histogram and feature maps are those of the latest measurement, not of
        that step (only the layer statistics are kept for every step).
        """
        model = self.session.model
        if model is None or not _has_submodule(model, name):
            return
        if name not in self._probed:
            self.toggle_probe(name)
        for row in range(self.probed_list.count()):
            if self.probed_list.item(row).data(Qt.ItemDataRole.UserRole) == name:
                self.probed_list.setCurrentRow(row)
        self.status.setText(f"{name or '(model)'}: probed" + (f" (asked from step {step:,})" if step >= 0 else ""))

    def set_probed(self, names) -> None:
        """Probe exactly ``names`` (unknown names raise ``KeyError`` as in :meth:`toggle_probe`)."""
        for name in list(self._probed):
            if name not in names:
                self.toggle_probe(name)
        for name in names:
            if name not in self._probed:
                self.toggle_probe(name)

    def training_callback(self) -> ProbeCallback:
        """The core callback to add to the Trainer's callbacks for live probes (same object every call)."""
        self._callback.set_probed(self._probed)
        return self._callback

    def training_callbacks(self) -> list:
        """``[training_callback()]``: what ``TrainingPanel.extra_callbacks()`` should return."""
        return [self.training_callback()]

    def is_busy(self) -> bool:
        """True while a probe batch runs."""
        return self._thread is not None

    def run_probe_batch(self) -> bool:
        """Start one probe batch on a worker thread; False when it cannot start now (the reason is shown)."""
        model = self.session.model
        reason = None
        if self.is_busy():
            reason = "a probe batch is already running"
        elif self._training_running():
            reason = "training owns the model: the probes measure live (when: see the line above)"
        elif model is None:
            reason = "no model"
        elif not self._probed:
            reason = "probe a module first (tree: right-click › Probe)"
        if reason is None:
            make_batch, reason = self._batch_maker()
        if reason is not None:
            self.status.setText(reason)
            return False
        self.status.setText("running…")
        wanted = self.weights.current_parameter()
        self._worker = ProbeBatchWorker(model, self._probed, make_batch, weight_names=[wanted] if wanted else [])
        self._worker.done.connect(self._on_batch_done)
        self._worker.failed.connect(self._on_batch_failed)
        self._thread = start_in_thread(self._worker, "probeThread")
        self._thread.finished.connect(self._on_thread_finished)
        self._update_buttons()
        return True

    def show_stats(self, stats: dict[str, ActivationStats]) -> None:
        """Draw activation results (keyed by ``ActivationStats.label``) and keep the current selection."""
        self._stats.update(stats)
        self._refresh_list()
        self._show_current()
        self.resultsShown.emit()

    def on_model_changed(self) -> None:
        """``session.model`` was replaced: forget probes, results and history."""
        self.shutdown()
        self._probed.clear()
        self._stats.clear()
        self._act_badges, self._grad_badges = {}, {}
        self.grads.clear()
        self.weights.clear()
        self.layers.clear()
        self._after_probes_changed()
        self._push_badges()

    def shutdown(self, timeout_ms: int = 10000) -> bool:
        """Abandon a running probe batch (its late result is dropped) and wait for its thread."""
        if self._worker is not None:
            self._worker.aborted = True
        thread = self._thread
        if thread is None:
            return True
        return wait_for(thread, timeout_ms)  # polls without holding the GIL the worker needs

    # ------------------------------------------------------------------ slots
    @Slot(dict)
    def _on_batch_done(self, result: dict) -> None:
        self._stats = {k: v for k, v in self._stats.items() if v.module in self._probed}
        self.show_stats(result["stats"])
        self.weights.show_histograms(result.get("weights", {}))
        self._act_badges = result["badges"]
        self._push_badges()
        self.status.setText(f"probe batch: {len(result['stats'])} tensors")

    @Slot(str)
    def _on_batch_failed(self, text: str) -> None:
        last = text.strip().splitlines()[-1] if text.strip() else "error"
        self.status.setText(f"probe batch failed: {last}")
        self.status.setToolTip(text)

    @Slot()
    def _on_thread_finished(self) -> None:
        self._thread, self._worker = None, None
        self._update_buttons()

    # ------------------------------------------------------------------ cadence
    def cadence(self) -> tuple[int | None, float]:
        """The cadence set here: ``(every, budget)``, ``every`` None for the time budget (a share, 0.02 = 2 %)."""
        return self._callback.cadence_setting()

    def cadence_text(self) -> str:
        """The line that says when the probes measure next and why."""
        return self.cadence_label.text()

    def _on_cadence_changed(self, *_args) -> None:
        every = self.every_spin.value() if self.cadence_combo.currentText() == CADENCE_EVERY else None
        self._callback.set_cadence(every, self.budget_spin.value() / 100.0)
        self._show_cadence_controls()
        if self._training_running():
            self.cadence_label.setText("New cadence: it applies from the next step.")
        else:
            self._show_setting()

    def _show_cadence_controls(self) -> None:
        budget = self.cadence_combo.currentText() == CADENCE_BUDGET
        self.budget_spin.setVisible(budget)
        self.every_spin.setVisible(not budget)

    def _show_setting(self) -> None:
        every, budget = self._callback.cadence_setting()
        self.cadence_label.setText(describe_setting(every, budget))

    def _show_plan(self, plan: CadencePlan) -> None:
        self._plan = plan
        text = describe_plan(plan)
        self.cadence_label.setText(f"{text[:1].upper()}{text[1:]}.")

    def _on_running_changed(self, running: bool) -> None:
        if not running:  # the plan of a run that ended says nothing about the next one
            self._plan = None
            self._show_setting()

    @Slot(list)
    def _on_reports(self, reports: list[ProbeReport]) -> None:
        plans = [r.cadence for r in reports if r.cadence is not None]
        if plans and self._training_running():
            self._show_plan(plans[-1])
        self.layers.add([r.layers for r in reports if r.layers is not None])
        acts: dict[str, ActivationStats] = {}
        for r in reports:
            acts.update(r.activations)
            if r.grads is not None:
                self.grads.append(r.step, r.grads, self._probed)
        last = reports[-1]
        with_ratios = [r for r in reports if r.update_ratios]
        if with_ratios:
            self.weights.show_update_ratios(with_ratios[-1].update_ratios, with_ratios[-1].step)
        for r in reversed(reports):
            if self.weights.show_histograms(r.weight_histograms, r.step):
                break
        with_grads = [r for r in reports if r.grads is not None]
        if with_grads:
            self.grads.show_latest(with_grads[-1].step, with_grads[-1].grads, self._probed)
        self.grads.refresh_curves()
        self._act_badges, self._grad_badges = last.badges, {}
        self._push_badges()
        if acts:
            self.show_stats(acts)
        else:
            self.resultsShown.emit()
        self.status.setText(f"live: step {last.step}")

    def _on_current_changed(self, *_args) -> None:
        self._fill_leaves()
        self._show_current()

    def _on_leaf_changed(self, _text: str) -> None:
        self._show_current()

    def _on_remove_clicked(self) -> None:
        item = self.probed_list.currentItem()
        if item is not None:
            self.toggle_probe(item.data(Qt.ItemDataRole.UserRole))

    # ------------------------------------------------------------------ helpers
    def _training_running(self) -> bool:
        return self.session.running

    def _batch_maker(self):
        n = self.batch_spin.value()
        if self.source_combo.currentText() == SOURCE_DATASET:
            try:
                data_cfg = self.session.data_config()
            except ValueError as exc:
                return None, f"the training settings: {exc}"
            if data_cfg is None:
                return None, "no training settings to take the dataset from"
            model = self.session.model
            return (lambda: dataset_batch(data_cfg, n, model=model)), None
        model = self.session.model
        shape = self.session.input_shape or (default_input_shape(model) if model is not None else None)
        if not shape:
            return None, "set an input shape first (e.g. 1,3,224,224 above the tree)"
        shape = (n, *tuple(shape)[1:])
        return (lambda: random_input(shape, model=model)), None

    def _after_probes_changed(self) -> None:
        self._callback.set_probed(self._probed)
        self._refresh_weight_params()
        self._stats = {k: v for k, v in self._stats.items() if v.module in self._probed}
        self._refresh_list()
        self._show_current()
        self._update_buttons()
        self.probesChanged.emit(self.probed())
        self.session.set_probed(self.probed())

    def _update_buttons(self) -> None:
        self.run_button.setEnabled(not self.is_busy())
        self.remove_button.setEnabled(bool(self._probed))

    def _refresh_list(self) -> None:
        current = self._current_module()
        self.probed_list.blockSignals(True)
        self.probed_list.clear()
        for name in self._probed:
            item = QListWidgetItem(name or "(model)")
            item.setData(Qt.ItemDataRole.UserRole, name)
            self.probed_list.addItem(item)
            if name == current:
                self.probed_list.setCurrentItem(item)
        if self.probed_list.currentItem() is None and self._probed:
            self.probed_list.setCurrentRow(0)
        self.probed_list.blockSignals(False)
        self._fill_leaves()

    def _current_module(self) -> str | None:
        item = self.probed_list.currentItem()
        return None if item is None else item.data(Qt.ItemDataRole.UserRole)

    def _fill_leaves(self) -> None:
        module = self._current_module()
        labels = [k for k, s in self._stats.items() if s.module == module]
        keep = self.leaf_combo.currentText()
        self.leaf_combo.blockSignals(True)
        self.leaf_combo.clear()
        self.leaf_combo.addItems(labels)
        if keep in labels:
            self.leaf_combo.setCurrentText(keep)
        self.leaf_combo.blockSignals(False)
        self.leaf_combo.setVisible(len(labels) > 1)

    def current_stats(self) -> ActivationStats | None:
        """The results shown now (selected module and tensor), or None."""
        return self._stats.get(self.leaf_combo.currentText())

    def _show_current(self) -> None:
        s = self.current_stats()
        if s is None:
            self.hist_bars.setOpts(x0=[0], x1=[1], height=[0])
            self.hist_plot.setYRange(0.0, 1.0)  # an empty histogram reads 0..1, not -400..400
            self.map_image.clear()
            self.stats_label.setText("Probe a module, then run a probe batch or start training.")
            return
        h = s.histogram
        edges = h.edges if math.isfinite(h.lo) else np.arange(len(h.counts) + 1, dtype=float)
        self.hist_bars.setOpts(x0=edges[:-1], x1=edges[1:], height=h.counts)
        self.hist_plot.setYRange(0.0, float(max(np.max(h.counts, initial=0.0), 1.0)))
        self.hist_plot.setTitle(f"Activation histogram — {s.label}", size=TITLE_SIZE)
        self._show_image(s)
        self.stats_label.setText(stats_text(s))

    def _show_image(self, s: ActivationStats) -> None:
        if s.image is None:
            self.map_image.clear()
            self.map_plot.setTitle(f"No picture for a {len(s.shape)}-D output", size=TITLE_SIZE)
            return
        img = s.image
        if s.image_kind == "channels":
            levels = (0.0, 1.0)
            c = min(s.shape[1], 16) if len(s.shape) == 4 else 0
            title = f"Feature maps — first {c} of {s.shape[1]} channels, sample 0"
        else:
            finite = img[np.isfinite(img)]
            lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
            levels = (lo, hi if hi > lo else lo + 1.0)
            title = f"Heatmap — {'×'.join(map(str, img.shape))} (rows × features)"
        self.map_image.setImage(img, levels=levels, autoLevels=False)
        self.map_plot.setTitle(title, size=TITLE_SIZE)
        self.map_plot.autoRange()

    # ------------------------------------------------------------------ weights
    def _on_tree_node_changed(self, obj) -> None:
        """Follow the tree's selection: a parameter row chosen there is the weight histogram's parameter."""
        info = getattr(obj, "info", None)  # a ParamRow carries the parameter's TensorInfo
        name = getattr(info, "name", None)
        if isinstance(name, str) and not getattr(info, "is_buffer", False):
            self._refresh_weight_params(prefer=name)

    def _weight_param_names(self, extra: str | None = None) -> list[str]:
        """The probed modules' parameters (all of the model's when none is probed), plus ``extra``."""
        model = self.session.model
        if model is None:
            return []
        names = [n for n, _ in model.named_parameters()]
        if self._probed:
            inside = [n for n in names if any(m == "" or n.startswith(m + ".") for m in self._probed)]
            if extra in names and extra not in inside:
                inside.append(extra)
            names = inside
        return names

    def _refresh_weight_params(self, prefer: str | None = None) -> None:
        self.weights.set_parameters(self._weight_param_names(prefer), prefer=prefer)

    def weight_parameter(self) -> str:
        """The parameter whose weight histogram is drawn (``""`` when none)."""
        return self.weights.current_parameter()

    def choose_weight_parameter(self, name: str) -> bool:
        """Draw the weight histogram of parameter ``name`` (added to the chooser when it is a model parameter)."""
        self._refresh_weight_params(prefer=name)
        return self.weights.current_parameter() == name

    def _on_weight_param_changed(self, name: str) -> None:
        """Ask the live callback for the new parameter; when idle, have core measure it now."""
        self._callback.set_weight_histograms([name] if name else [])
        model = self.session.model
        if not name or model is None or self._training_running() or self.is_busy():
            return  # the training thread (or the probe worker) owns the model: the next report brings it
        if is_skeleton(model):
            return  # an attached script's structure has no values here: its probes send the histograms
        try:
            hists = weight_histograms(model, [name])
        except KeyError:
            return
        self.weights.show_histograms(hists)

    def _push_badges(self) -> None:
        self.session.set_badges(merge_badges(self._act_badges, self._grad_badges))

    def badges(self) -> dict:
        """The badges pushed to the tree last: ``{module name: [Badge, ...]}``."""
        return merge_badges(self._act_badges, self._grad_badges)


def _has_submodule(model, name: str) -> bool:
    try:
        model.get_submodule(name)
    except AttributeError:
        return False
    return True
