"""Model tree figures: build + first paint for 20,000 leaf modules and resnet50; unchecking the root.

- ``tree_build_20k_s``: from ``nn.Module`` to ``build_summary`` + ``ModelTreeModel`` +
  view shown and first screen painted (``grab()``), 20,000 ``Linear`` leaves in
  nested ``Sequential``s (20 x 10 x 100). Target <= 0.25 s.
- ``tree_toggle_root_20k_s``: unchecking the root's Train box (``setData``):
  every parameter frozen through ``core.model.freezing``, counters refreshed, visible
  rows repainted. Target <= 0.2 s.
- ``tree_toggle_root_20k_ui_s``: the UI's share of that (``refresh_trainable``
  + events + repaint), i.e. without ``core.model.freezing.set_trainable``.
- ``tree_build_resnet50_s``: torchvision resnet50, same path as the first figure. Target <= 0.05 s.

Each figure is the median of ``REPEATS`` runs (seconds).
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

REPEATS = 5


def _big_model():
    from torch import nn

    return nn.Sequential(*[nn.Sequential(*[nn.Sequential(*[nn.Linear(2, 2) for _ in range(100)])
                                           for _ in range(10)]) for _ in range(20)])


class _Controller:
    """What the tree's context menu needs; set_trainable goes straight to core.model.freezing."""

    keep_bn_stats_fixed = False
    probes_panel = None

    def __init__(self):
        self.tree_model = None

    def set_trainable(self, path, flag):
        from workbench.core.model import freezing

        freezing.set_trainable(self.tree_model.root.module, path, flag)
        self.tree_model.refresh_trainable()


def _build_and_paint(model, app):
    from workbench.core.model.tree import build_summary
    from workbench.ui.model.tree_model import ModelTreeModel
    from workbench.ui.model.tree_view import ModelTreeWidget

    ctl = _Controller()
    t0 = time.perf_counter()
    tm = ModelTreeModel(build_summary(model), ctl.set_trainable)
    ctl.tree_model = tm
    widget = ModelTreeWidget(ctl)
    widget.set_model(tm)
    widget.resize(1000, 700)
    widget.show()
    app.processEvents()
    widget.grab()
    return time.perf_counter() - t0, widget, tm


def _toggle_root(tm, widget, app) -> float:
    from PySide6.QtCore import Qt

    from workbench.ui.model.tree_model import CHECK, COL_TRAIN

    t0 = time.perf_counter()
    tm.setData(tm.index(0, COL_TRAIN), Qt.CheckState.Unchecked, CHECK)
    app.processEvents()
    widget.grab()
    elapsed = time.perf_counter() - t0
    assert tm.root.trainable_params == 0
    tm.setData(tm.index(0, COL_TRAIN), Qt.CheckState.Checked, CHECK)
    return elapsed


def _toggle_root_ui_only(tm, widget, app) -> float:
    from workbench.core.model import freezing

    freezing.set_trainable(tm.root.module, "", False)
    t0 = time.perf_counter()
    tm.refresh_trainable()
    app.processEvents()
    widget.grab()
    elapsed = time.perf_counter() - t0
    freezing.set_trainable(tm.root.module, "", True)
    tm.refresh_trainable()
    return elapsed


def run() -> dict[str, float]:
    """Median seconds for the three figures."""
    import torchvision
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    big, r50 = _big_model(), torchvision.models.resnet50()
    builds, toggles, ui_toggles, r50_builds = [], [], [], []
    for _ in range(REPEATS):
        elapsed, widget, tm = _build_and_paint(big, app)
        builds.append(elapsed)
        toggles.append(_toggle_root(tm, widget, app))
        ui_toggles.append(_toggle_root_ui_only(tm, widget, app))
        widget.close()
        widget.deleteLater()
        elapsed, widget, _ = _build_and_paint(r50, app)
        r50_builds.append(elapsed)
        widget.close()
        widget.deleteLater()
        app.processEvents()
    return {
        "tree_build_20k_s": statistics.median(builds),
        "tree_toggle_root_20k_s": statistics.median(toggles),
        "tree_toggle_root_20k_ui_s": statistics.median(ui_toggles),
        "tree_build_resnet50_s": statistics.median(r50_builds),
    }


if __name__ == "__main__":
    for key, value in run().items():
        print(f"{key:30s} {value:.4f}")
