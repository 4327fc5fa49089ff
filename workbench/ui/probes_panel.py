"""The Probes dock: activation histograms, feature maps, gradient norms, health badges.

``ProbesPanel(window)`` shows what :mod:`workbench.core.probes`,
:mod:`workbench.core.gradients` and :mod:`workbench.core.health` produced; it
computes no statistic itself. Results come from two sources:

* **Run probe batch**: one forward pass in ``eval()`` / ``torch.no_grad()`` on a
  :class:`~workbench.ui.probe_worker.ProbeBatchWorker` QThread, on random data of
  ``window.input_shape`` or on the first samples of the training dataset;
* **live during training**: :meth:`ProbesPanel.training_callback` returns the
  :class:`~workbench.core.probe_callback.ProbeCallback` to add to the Trainer's
  callbacks; its sink emits :attr:`ProbesPanel.reportsArrived` from the training
  thread, delivered to the GUI thread as a queued call (batched, ~25 Hz at most).

objectNames: ``probesPanel``, ``activationHistogram``, ``featureMapView``,
``gradNormPlot`` (``gradNormCurves`` + ``gradNormBars``), ``updateRatioPlot``,
``runProbeButton``, ``probedList``, ``probeStats``.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QThread, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from workbench.core.health import merge_badges
from workbench.core.probe_callback import ProbeCallback, ProbeReport
from workbench.core.probes import ActivationStats, dataset_batch, random_input
from workbench.ui.plot_buffer import PlotBuffer
from workbench.ui.probe_worker import ProbeBatchWorker, start_probe_worker

SOURCE_RANDOM = "Random data (input shape)"
SOURCE_DATASET = "Training dataset (first samples)"
_PENS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
_FROZEN_BRUSH = pg.mkBrush(180, 180, 180, 90)


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


class ProbesPanel(QWidget):
    """Probe controls and plots for ``window.model``.

    Parameters
    ----------
    window : QMainWindow
        Offers ``model``, ``input_shape`` (e.g. ``(1, 1, 8, 8)``) and optionally
        ``tree_model.set_badges``, ``training_panel.is_running()`` and
        ``training_panel.settings.config()`` (for the dataset source).

    Signals
    -------
    reportsArrived(list)
        Live :class:`~workbench.core.probe_callback.ProbeReport` batches (emitted on the training thread).
    probesChanged(list)
        The probed module names changed.
    resultsShown()
        New results were drawn (a probe batch finished or live reports arrived).
    """

    reportsArrived = Signal(list)
    probesChanged = Signal(list)
    resultsShown = Signal()

    def __init__(self, window, parent: QWidget | None = None):
        super().__init__(parent if parent is not None else window)
        self.setObjectName("probesPanel")
        self.window_ = window
        self._probed: list[str] = []
        self._stats: dict[str, ActivationStats] = {}
        self._act_badges: dict = {}
        self._grad_badges: dict = {}
        self._grad_history: dict[str, PlotBuffer] = {}
        self._curves: dict[str, pg.PlotDataItem] = {}
        self._thread: QThread | None = None
        self._worker: ProbeBatchWorker | None = None
        self._callback = ProbeCallback(self.reportsArrived.emit, probed=())
        self.reportsArrived.connect(self._on_reports)
        self._build()
        self._update_buttons()

    # ------------------------------------------------------------------ building
    def _build(self) -> None:
        self.source_combo = QComboBox(objectName="probeSourceCombo")
        self.source_combo.addItems([SOURCE_RANDOM, SOURCE_DATASET])
        self.batch_spin = QSpinBox(objectName="probeBatchSize", minimum=1, maximum=1024, value=8)
        self.batch_spin.setToolTip("Samples in the probe batch (the N of (N, C, H, W))")
        self.run_button = QPushButton("Run probe batch", objectName="runProbeButton")
        self.run_button.setToolTip("One forward pass in eval() mode without gradients, off the GUI thread")
        self.run_button.clicked.connect(self.run_probe_batch)
        self.status = QLabel(objectName="probeStatus")
        top = QHBoxLayout()
        for w in (self.source_combo, QLabel("N"), self.batch_spin, self.run_button):
            top.addWidget(w)
        top.addWidget(self.status, 1)

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

        self.tabs = QTabWidget(objectName="probeTabs")
        self.tabs.addTab(self._build_activations(), "Activations")
        self.tabs.addTab(self._build_gradients(), "Gradients")
        self.tabs.addTab(self._build_weights(), "Weights")

        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(left)
        split.addWidget(self.tabs)
        split.setStretchFactor(1, 4)
        split.setSizes([160, 640])
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(split, 1)

    def _build_activations(self) -> QWidget:
        self.hist_plot = pg.PlotWidget(title="Activation histogram", background="w")
        self.hist_plot.setObjectName("activationHistogram")
        self.hist_plot.setLabel("bottom", "value")
        self.hist_plot.setLabel("left", "count")
        self.hist_bars = pg.BarGraphItem(x0=[0], x1=[1], height=[0], brush="#1f77b4", pen=None)
        self.hist_plot.addItem(self.hist_bars)

        self.map_plot = pg.PlotWidget(title="Feature maps", background="w")
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

        plots = QHBoxLayout()
        plots.addWidget(self.hist_plot, 1)
        plots.addWidget(self.map_plot, 1)
        page = QWidget()
        v = QVBoxLayout(page)
        v.addLayout(plots, 1)
        row = QHBoxLayout()
        row.addWidget(self.stats_label, 1)
        row.addWidget(self.leaf_combo)
        v.addLayout(row)
        return page

    def _build_gradients(self) -> QWidget:
        self.grad_widget = pg.GraphicsLayoutWidget()
        self.grad_widget.setBackground("w")
        self.grad_widget.setObjectName("gradNormPlot")
        self.grad_curves = self.grad_widget.addPlot(row=0, col=0, title="Grad norm over steps (probed modules)")
        self.grad_curves.setLogMode(y=True)
        self.grad_curves.setLabel("bottom", "step")
        self.grad_curves.setLabel("left", "L2 norm")
        self.grad_curves.addLegend(offset=(5, 5))
        self.grad_curves.showGrid(y=True, alpha=0.3)
        self.grad_bars_plot = self.grad_widget.addPlot(row=1, col=0, title="Latest step, per layer (grey: frozen)")
        self.grad_bars_plot.setLabel("left", "log10 grad norm")
        self.grad_bars = pg.BarGraphItem(x=[0], height=[0], width=0.8, brush="#2ca02c", pen=None)
        self.frozen_bars = pg.BarGraphItem(x=[0], y0=[0], height=[0], width=0.8, brush=_FROZEN_BRUSH, pen=None)
        self.grad_bars_plot.addItem(self.frozen_bars)
        self.grad_bars_plot.addItem(self.grad_bars)
        self.grad_label = QLabel(objectName="gradNormLabel")
        page = QWidget()
        v = QVBoxLayout(page)
        v.addWidget(self.grad_widget, 1)
        v.addWidget(self.grad_label)
        return page

    def _build_weights(self) -> QWidget:
        self.update_plot = pg.PlotWidget(title="Update ratio ‖Δw‖/‖w‖ per parameter", background="w")
        self.update_plot.setObjectName("updateRatioPlot")
        self.update_plot.setLabel("left", "log10 ratio")
        self.update_plot.addLine(y=-3, pen=pg.mkPen("#888", style=Qt.PenStyle.DashLine))  # the ~1e-3 convention
        self.update_bars = pg.BarGraphItem(x=[0], height=[0], width=0.8, brush="#9467bd", pen=None)
        self.update_plot.addItem(self.update_bars)
        page = QWidget()
        v = QVBoxLayout(page)
        v.addWidget(self.update_plot, 1)
        v.addWidget(QLabel("Dashed line: 1e-3, the usual rule of thumb (Karpathy); measured live during training."))
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
        model = getattr(self.window_, "model", None)
        if model is None:
            raise KeyError(f"no model to probe {name!r} in")
        try:
            model.get_submodule(name)
        except AttributeError as exc:
            raise KeyError(f"no module named {name!r} in {type(model).__name__}") from exc
        self._probed.append(name)
        self._after_probes_changed()
        return True

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
        model = getattr(self.window_, "model", None)
        reason = None
        if self.is_busy():
            reason = "a probe batch is already running"
        elif self._training_running():
            reason = "training owns the model: probes update live every 10 steps"
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
        self._worker = ProbeBatchWorker(model, self._probed, make_batch)
        self._worker.done.connect(self._on_batch_done)
        self._worker.failed.connect(self._on_batch_failed)
        self._thread = start_probe_worker(self._worker)
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
        """``window.model`` was replaced: forget probes, results and history."""
        self.shutdown()
        self._probed.clear()
        self._stats.clear()
        self._act_badges, self._grad_badges = {}, {}
        self._grad_history.clear()
        for curve in self._curves.values():
            self.grad_curves.removeItem(curve)
        self._curves.clear()
        self._after_probes_changed()
        self._push_badges()

    def shutdown(self, timeout_ms: int = 10000) -> bool:
        """Abandon a running probe batch (its late result is dropped) and wait for its thread."""
        if self._worker is not None:
            self._worker.aborted = True
        thread = self._thread
        if thread is None:
            return True
        try:
            return thread.wait(timeout_ms)
        except RuntimeError:  # already deleted
            return True

    # ------------------------------------------------------------------ slots
    @Slot(dict)
    def _on_batch_done(self, result: dict) -> None:
        self._stats = {k: v for k, v in self._stats.items() if v.module in self._probed}
        self.show_stats(result["stats"])
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

    @Slot(list)
    def _on_reports(self, reports: list[ProbeReport]) -> None:
        acts: dict[str, ActivationStats] = {}
        for r in reports:
            acts.update(r.activations)
            if r.grads is not None:
                self._append_grads(r)
        last = reports[-1]
        if last.update_ratios:
            self._show_update_ratios(last.update_ratios)
        if last.grads is not None:
            self._show_grad_bars(last)
        self._refresh_curves()
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
        panel = getattr(self.window_, "training_panel", None)
        running = getattr(panel, "is_running", None)
        return bool(running()) if callable(running) else False

    def _batch_maker(self):
        n = self.batch_spin.value()
        if self.source_combo.currentText() == SOURCE_DATASET:
            settings = getattr(getattr(self.window_, "training_panel", None), "settings", None)
            if settings is None or not hasattr(settings, "config"):
                return None, "no training settings to take the dataset from"
            data_cfg = settings.config().data
            return (lambda: dataset_batch(data_cfg, n)), None
        shape = getattr(self.window_, "input_shape", None)
        if not shape:
            return None, "set an input shape first (e.g. 1,3,224,224 above the tree)"
        shape = (n, *tuple(shape)[1:])
        return (lambda: random_input(shape)), None

    def _after_probes_changed(self) -> None:
        self._callback.set_probed(self._probed)
        self._stats = {k: v for k, v in self._stats.items() if v.module in self._probed}
        self._refresh_list()
        self._show_current()
        self._update_buttons()
        self.probesChanged.emit(self.probed())

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
            self.map_image.clear()
            self.stats_label.setText("Probe a module, then run a probe batch or start training.")
            return
        h = s.histogram
        edges = h.edges if math.isfinite(h.lo) else np.arange(len(h.counts) + 1, dtype=float)
        self.hist_bars.setOpts(x0=edges[:-1], x1=edges[1:], height=h.counts)
        self.hist_plot.setTitle(f"Activation histogram — {s.label}")
        self._show_image(s)
        self.stats_label.setText(stats_text(s))

    def _show_image(self, s: ActivationStats) -> None:
        if s.image is None:
            self.map_image.clear()
            self.map_plot.setTitle(f"No picture for a {len(s.shape)}-D output")
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
        self.map_plot.setTitle(title)
        self.map_plot.autoRange()

    def _append_grads(self, r: ProbeReport) -> None:
        g = r.grads
        wanted = {"": "global", **{n: n for n in self._probed}}
        for name, label in wanted.items():
            value = g.modules.get(name)
            if value is None:
                continue
            buf = self._grad_history.setdefault(label, PlotBuffer(("step", "norm"), capacity=256))
            buf.append(step=r.step, norm=value)

    def _refresh_curves(self) -> None:
        for i, (label, buf) in enumerate(self._grad_history.items()):
            curve = self._curves.get(label)
            if curve is None:
                pen = pg.mkPen(_PENS[i % len(_PENS)], width=2 if label == "global" else 1)
                curve = self.grad_curves.plot(name=label, pen=pen)
                self._curves[label] = curve
            y = buf["norm"]
            ok = np.isfinite(y) & (y > 0)  # a log axis cannot show 0 / NaN
            curve.setData(buf["step"][ok], y[ok])

    def _show_grad_bars(self, r: ProbeReport) -> None:
        g = r.grads
        model = getattr(self.window_, "model", None)
        layers, frozen_layers = [], set()
        frozen = set(g.frozen)
        if model is not None:
            for name, module in model.named_modules():
                own = [f"{name}.{p}" if name else p for p, _ in module.named_parameters(recurse=False)]
                if not own:
                    continue
                if name in g.own:
                    layers.append(name)
                elif all(p in frozen for p in own):
                    layers.append(name)
                    frozen_layers.add(name)
        else:
            layers = list(g.own)
        x = np.arange(len(layers), dtype=float)
        vals = np.array([g.own.get(n, np.nan) for n in layers], dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            logs = np.where(vals > 0, np.log10(vals), np.nan)
        ok = np.isfinite(logs)
        lo = float(np.nanmin(logs)) - 1 if ok.any() else -8.0
        hi = float(np.nanmax(logs)) + 0.5 if ok.any() else 1.0
        self.grad_bars.setOpts(x=x[ok], y0=np.full(ok.sum(), lo), height=logs[ok] - lo, width=0.8)
        fz = np.array([n in frozen_layers for n in layers], dtype=bool)
        self.frozen_bars.setOpts(x=x[fz], y0=np.full(fz.sum(), lo), height=np.full(fz.sum(), hi - lo), width=0.8)
        step = max(1, math.ceil(len(layers) / 10))
        ticks = [(float(i), layers[i] or "(model)") for i in range(0, len(layers), step)]
        self.grad_bars_plot.getAxis("bottom").setTicks([ticks])
        self.grad_bars_plot.setYRange(lo, hi)
        self.grad_label.setText(
            f"step {r.step}: global grad norm {_fmt(g.global_norm)}; "
            f"{len(g.params)} parameters with gradients, {len(g.frozen)} frozen"
        )

    def _show_update_ratios(self, ratios: dict[str, float]) -> None:
        names = list(ratios)
        vals = np.array([ratios[n] for n in names], dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            logs = np.where(vals > 0, np.log10(vals), np.nan)
        ok = np.isfinite(logs)
        lo = min(-6.0, float(np.nanmin(logs)) - 0.5) if ok.any() else -6.0
        x = np.arange(len(names), dtype=float)
        self.update_bars.setOpts(x=x[ok], y0=np.full(ok.sum(), lo), height=logs[ok] - lo, width=0.8)
        step = max(1, math.ceil(len(names) / 8))
        self.update_plot.getAxis("bottom").setTicks([[(float(i), names[i]) for i in range(0, len(names), step)]])

    def _push_badges(self) -> None:
        tree = getattr(self.window_, "tree_model", None)
        if tree is not None and hasattr(tree, "set_badges"):
            tree.set_badges(merge_badges(self._act_badges, self._grad_badges))

    def badges(self) -> dict:
        """The badges pushed to the tree last: ``{module name: [Badge, ...]}``."""
        return merge_badges(self._act_badges, self._grad_badges)
