"""Screenshots of the Graph dock for the README.

Usage::

    QT_QPA_PLATFORM=offscreen python tools/graph_screenshots.py [OUT_DIR]

Opens the window offscreen (settings in a temporary folder) and saves into
``OUT_DIR`` (default ``docs/screenshots``): ``graph-resnet18-collapsed.png``
(a torchvision resnet18, top-level modules), ``graph-resnet18-expanded.png``
(layer1 and its first block opened: the skip connection's add), ``graph-vit.png``
(vit_b_16 with its encoder and first encoder layer opened: attention and the
residual stream) and ``graph-overlay.png`` (the whole window after training the
demo CNN 3 epochs with the activation-mean overlay, its blocks opened).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(out_dir: str) -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ["WORKBENCH_SETTINGS_DIR"] = tempfile.mkdtemp(prefix="workbench-settings-")
    os.environ["WORKBENCH_START_AHEAD"] = "0"
    os.environ["WORKBENCH_DATA_DIR"] = tempfile.mkdtemp(prefix="workbench-data-")  # the demo run's folder
    sys.path.insert(0, str(ROOT))
    import torch
    import torchvision
    from PySide6.QtWidgets import QApplication

    from workbench.core.model.spec import ArchSpec
    from workbench.ui.main_window import MainWindow

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    app = QApplication.instance() or QApplication([])
    window = MainWindow()
    window.resize(1600, 960)
    window.show()
    window.graph_dock.raise_()
    window.graph_dock.setFloating(True)  # the graph alone, larger than its tab under the tree
    window.graph_dock.resize(820, 940)
    panel = window.graph_panel

    def settle(seconds: float = 0.5) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            app.processEvents()
            time.sleep(0.01)

    def shoot(name: str, widget) -> None:
        settle()
        path = out / name
        widget.grab().save(str(path))
        print(f"wrote {path}")

    tmp = Path(tempfile.mkdtemp(prefix="workbench-graph-"))
    for arch in ("resnet18", "vit_b_16"):
        torch.save(getattr(torchvision.models, arch)().state_dict(), tmp / f"{arch}.pt")
    window.open_path(str(tmp / "resnet18.pt"), arch=ArchSpec("resnet18", {}))
    settle(1.0)
    panel.refresh()
    shoot("graph-resnet18-collapsed.png", panel)
    panel.set_expanded_set({"", "layer1", "layer1.0"})
    panel.select_module("layer1.0", center=True)
    shoot("graph-resnet18-expanded.png", panel)
    window.open_path(str(tmp / "vit_b_16.pt"), arch=ArchSpec("vit_b_16", {}))
    settle(1.0)
    panel.refresh()
    panel.set_expanded_set({"", "encoder", "encoder.layers", "encoder.layers.encoder_layer_0"})
    panel.select_module("encoder.layers.encoder_layer_0.self_attention")
    settle()
    top = panel.scene.frames["encoder.layers.encoder_layer_0"].sceneBoundingRect()
    panel.view.fit(top.united(panel.scene.boxes["x"].sceneBoundingRect()))  # the input down to layer 0's end
    shoot("graph-vit.png", panel)

    window.graph_dock.setFloating(False)  # back in its tab under the tree, in step with it
    window.open_demo()
    settle(1.0)
    panel.refresh()
    panel.set_expanded_set({"", "features"})
    panel.set_overlay("act_mean")
    window.probes_panel.training_callback().budget = 0.3
    window.training_panel.settings.epochs_spin.setValue(3)
    window.training_panel.set_in_process(True, remember=False)
    window.training_panel.start()
    end = time.monotonic() + 300
    while window.training_panel.is_running() and time.monotonic() < end:
        settle(0.2)
    window.tree_widget.select_name("features.3")
    shoot("graph-overlay.png", window)
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "docs/screenshots")))
