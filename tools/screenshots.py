"""Screenshots of the window after a short run, at three screen sizes, light and dark.

Usage::

    QT_QPA_PLATFORM=offscreen python tools/screenshots.py [OUT_DIR]

Opens the window offscreen on the built-in demo model with its default layout
(settings in a temporary folder, never the user's), probes two layers, trains
3 epochs on the built-in digits data in this process, then saves
``<W>x<H>-<theme>.png`` for 1280x800, 1600x960 and 1920x1080 in light and dark
into ``OUT_DIR`` (default ``docs/screenshots``).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

#: (width, height) of each screenshot, pixels.
SIZES = ((1280, 800), (1600, 960), (1920, 1080))
#: Themes, in the order they are shot.
THEMES = ("light", "dark")
#: Modules of the demo model probed during the run.
PROBES = ("features.0", "features.3")
#: Longest wait for the run, s.
RUN_TIMEOUT_S = 300.0


def _settle(app, rounds: int = 20) -> None:
    for _ in range(rounds):
        app.processEvents()
        time.sleep(0.01)


def train_demo(window, app, epochs: int = 3) -> str:
    """Probe :data:`PROBES` and train the demo ``epochs`` epochs in this process; returns the run's end reason.

    Parameters
    ----------
    window : MainWindow
    app : QApplication
    epochs : int

    Returns
    -------
    str
        ``"completed"`` normally (``panel.last_reason()``).
    """
    panel = window.training_panel
    panel.set_in_process(True, remember=False)
    panel.settings.run_dir_edit.setText(tempfile.mkdtemp(prefix="workbench-shot-run-"))
    panel.settings.epochs_spin.setValue(epochs)
    for name in PROBES:
        window.probes_panel.toggle_probe(name)
    if not panel.start():
        raise RuntimeError("the run did not start")
    started = time.monotonic()
    while panel.is_running() and time.monotonic() - started < RUN_TIMEOUT_S:
        app.processEvents()
        time.sleep(0.01)
    if panel.is_running():
        panel.shutdown(ask=False)
        raise RuntimeError(f"the run took more than {RUN_TIMEOUT_S:.0f} s")
    _settle(app)
    return panel.last_reason()


def shoot(window, app, out_dir: Path, sizes=SIZES, themes=THEMES) -> list[Path]:
    """Save the window at every size in every theme, default dock sizes each time; returns the files.

    Parameters
    ----------
    window : MainWindow
    app : QApplication
    out_dir : Path
        Created when missing.
    sizes : sequence of (int, int)
    themes : sequence of str

    Returns
    -------
    list of Path
        ``<W>x<H>-<theme>.png`` in ``out_dir``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for theme in themes:
        window.theme.set_theme(theme, remember=False)
        for width, height in sizes:
            window.resize(width, height)
            _settle(app)
            window.apply_default_dock_sizes()
            _settle(app)
            window.training_panel.plots.refresh(force=True)
            _settle(app)
            path = out_dir / f"{width}x{height}-{theme}.png"
            if not window.grab().save(str(path), "PNG"):
                raise OSError(f"could not write {path}")
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """Train, shoot, print the files written; returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    out_dir = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / "docs" / "screenshots"
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ["WORKBENCH_SETTINGS_DIR"] = tempfile.mkdtemp(prefix="workbench-shot-settings-")
    os.environ.setdefault("WORKBENCH_START_AHEAD", "0")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    from workbench.ui.app import unattended_prompts
    from workbench.ui.main_window import MainWindow
    from workbench.ui.qsettings import set_application_names
    from workbench.ui.threading import collect_garbage_on_gui_thread

    set_application_names()
    collect_garbage_on_gui_thread()
    window = MainWindow(prompts=unattended_prompts())
    width, height = SIZES[0]
    window.resize(width, height)
    window.show()
    window.tree_widget.expand_to_depth(1)
    _settle(app)
    try:
        reason = train_demo(window, app)
        print(f"run {reason}")
        probed = window.probes_panel.probed_list
        if probed.count():
            probed.setCurrentRow(probed.count() - 1)
        window.tree_widget.select_name(PROBES[-1])
        for path in shoot(window, app, out_dir):
            print(path)
    finally:
        window.training_panel.shutdown(ask=False)
        window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
