"""The Graph dock in the real window: in step with the tree both ways, frozen at once, live overlays during a
run, the NaN trace's module outlined, export, and the hook-trace fallback said in the view."""

from __future__ import annotations

import pytest
import torch
import torchvision
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage
from torch import nn

from workbench.core.model.spec import ArchSpec
from workbench.core.probe.health import Badge

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")
RUN_TIMEOUT_MS = 90_000


def _show_graph(qtbot, win):
    win.graph_dock.raise_()
    panel = win.graph_panel
    qtbot.waitUntil(lambda: panel.graph is not None, timeout=60_000)
    return panel


def _click(qtbot, panel, name: str, double: bool = False) -> None:
    """What a user does: click (or double-click) the box of node ``name`` in the view."""
    box = panel.scene.boxes[name]
    panel.view.centerOn(box)
    pos = panel.view.mapFromScene(box.sceneBoundingRect().center())
    if double:
        qtbot.mouseDClick(panel.view.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    else:
        qtbot.mouseClick(panel.view.viewport(), Qt.MouseButton.LeftButton, pos=pos)


@pytest.fixture
def resnet18_window(main_window, tmp_path):
    win, _ = main_window
    path = tmp_path / "resnet18.pt"
    torch.save(torchvision.models.resnet18().state_dict(), path)
    assert win.open_path(str(path), arch=ArchSpec("resnet18", {}))
    return win


def test_graph_and_tree_stay_in_step_both_ways(resnet18_window, qtbot):
    win = resnet18_window
    panel = _show_graph(qtbot, win)
    boxes = [n.name for n in panel.view_graph.nodes if n.op == "module"]
    assert boxes == ["conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4", "avgpool", "fc"]
    assert "torch.export" in panel.status.text()

    _click(qtbot, panel, "layer3")  # graph -> tree: selection
    assert win.tree_widget.current_node().name == "layer3"
    win.tree_widget.select_name("layer4")  # tree -> graph
    assert panel.scene.selected == "layer4"

    _click(qtbot, panel, "layer2", double=True)  # graph -> tree: expansion
    assert "layer2" in panel.expanded and win.tree_widget.is_expanded("layer2")
    assert {"layer2.0", "layer2.1"} <= {n.name for n in panel.view_graph.nodes}
    win.tree_widget.set_expanded("layer1", True)  # tree -> graph
    assert "layer1" in panel.expanded and "layer1.0" in panel.scene.boxes
    win.tree_widget.set_expanded("layer1", False)
    assert "layer1" not in panel.expanded and "layer1" in panel.scene.boxes

    win.set_trainable("layer3", False)  # freezing in the tree shows at once
    assert panel.scene.is_frozen("layer3") and not panel.scene.is_frozen("layer4")
    win.set_trainable("layer3", True)
    assert not panel.scene.is_frozen("layer3")


def test_residual_adds_show_when_a_block_is_opened_and_static_overlays_color(resnet18_window, qtbot, tmp_path):
    win = resnet18_window
    panel = _show_graph(qtbot, win)
    panel.set_expanded_set({"", "layer1", "layer1.0"})
    ops = [n for n in panel.view_graph.nodes if n.module_path == "layer1.0" and n.op != "module"]
    assert any("add" in n.op for n in ops)  # the skip connection's add, inside the block
    panel.set_overlay("params")
    values = panel.overlay_values()
    assert values["layer4"] == 8_393_728 and values["layer2"] == 525_568  # the tree's counts
    assert "layer1" not in values  # open: its blocks are coloured instead
    assert values["layer1.1"] == 73_984
    assert panel.scene.color_of("layer4") != panel.scene.color_of("layer3")
    svg, png = panel.export(str(tmp_path / "g.svg")), panel.export(str(tmp_path / "g.png"))
    assert "<svg" in open(svg).read()
    image = QImage(png)
    assert image.width() > 100 and image.height() > 300


def test_live_overlay_changes_as_measurements_arrive_and_a_nan_module_is_outlined(main_window, qtbot):
    win, panel = main_window
    graph = _show_graph(qtbot, win)  # the demo CNN
    # every 10th of the 69 steps: several measurements whatever the machine's load (a time budget measured once
    # on a loaded machine)
    win.probes_panel.training_callback().set_cadence(10)
    graph.set_overlay("act_mean")
    assert graph.overlay_values() == {}
    panel.settings.epochs_spin.setValue(3)
    seen: list = []
    win.session.probeReports.connect(lambda _r: seen.append(dict(graph.overlay_values())))
    with qtbot.waitSignal(panel.runningChanged, timeout=5000):
        assert panel.start()
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=RUN_TIMEOUT_MS)
    values = [v for v in seen if v]
    assert len(values) >= 2 and values[0] != values[-1]  # recoloured as measurements arrived
    assert graph.step_slider.isVisible() and graph.step_slider.maximum() >= 1
    latest = graph.overlay_values()
    graph.step_slider.setValue(0)  # scrub back to the first measured step
    assert f"at step {graph.measured_steps()[0]}" in graph.legend.text()
    assert graph.overlay_values() != latest

    win.session.reveal("features.0", 7)  # a heatmap cell shown: the view goes there, nothing is outlined
    assert graph.scene.outlined is None
    # what the Training panel does when a NaN trace named a module: a "nonfinite" badge, then reveal
    badges = dict(win.session.badges)
    badges["features.3"] = [Badge("nonfinite", 1.0, 7, "first non-finite output")]
    win.session.set_badges(badges)
    win.session.reveal("features.3", 7)
    assert graph.scene.outlined == "features.3" and graph.scene.box_of("features.3") is not None


class _Branchy(nn.Module):
    """Data-dependent control flow: neither torch.export nor torch.fx can trace it."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        return self.a(x) if x.sum() > 0 else self.b(x)


def test_a_model_that_cannot_be_traced_falls_back_to_the_hook_trace_and_says_so(main_window, qtbot):
    win, _ = main_window
    win.session.set_model(_Branchy(), input_shape=(1, 8), source="branchy")
    panel = _show_graph(qtbot, win)
    assert panel.graph.method == "hooks"
    assert "forward-hook trace" in panel.status.text()
