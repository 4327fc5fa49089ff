"""A screenshot of the window attached to a user's own training loop.

Usage::

    QT_QPA_PLATFORM=offscreen python tools/attach_screenshot.py [OUT.png]

Starts ``tests/attach_scripts/plain_loop.py`` (a torchvision resnet18 in a plain
loop with ``workbench.attach``) in another process, attaches the window
(settings and discovery files in temporary folders), probes ``layer2``,
freezes ``layer1`` from the tree, waits for a few epochs, saves the window at
1280x800 into ``OUT.png`` (default ``docs/screenshots/attach-1280x800.png``),
then stops the script.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(out: str) -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ["WORKBENCH_SETTINGS_DIR"] = tempfile.mkdtemp(prefix="workbench-settings-")
    os.environ["WORKBENCH_ATTACH_DIR"] = tempfile.mkdtemp(prefix="workbench-attach-")
    os.environ["WORKBENCH_START_AHEAD"] = "0"
    sys.path.insert(0, str(ROOT))
    from PySide6.QtWidgets import QApplication

    from tests.attach_scripts.common import finish, start_script
    from workbench.ui.main_window import MainWindow

    app = QApplication.instance() or QApplication([])
    window = MainWindow()
    window.resize(1280, 800)
    window.show()
    proc, info = start_script("plain_loop", Path(tempfile.mkdtemp(prefix="workbench-run-")) / "run")

    def settle(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            app.processEvents()
            time.sleep(0.01)

    try:
        if not window.attach_to(info["address"], info["token"]):
            return 1
        settle(3)
        window.session.probeToggleRequested.emit("layer2")
        settle(2)
        window.set_trainable("layer1", False)
        settle(6)
        window.grab().save(out)
        print(f"wrote {out}")
        window.training_panel.stop()
        settle(2)
    finally:
        window.training_panel.shutdown(ask=False)
        proc.kill()
        finish(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "docs/screenshots/attach-1280x800.png")))
