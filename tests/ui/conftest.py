"""Fixtures of the Qt tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _garbage_collected_on_the_gui_thread(qapp):
    """As ``workbench`` runs (``ui.app.main``): the cyclic GC runs only on the GUI thread.

    Without it a collection that a training or checkpoint-writer thread happened
    to trigger could free a QObject left in a reference cycle by an earlier test,
    and PySide deadlocked (``ui.threading.collect_garbage_on_gui_thread``).
    """
    from workbench.ui.threading import collect_garbage_on_gui_thread

    collect_garbage_on_gui_thread()
    yield


@pytest.fixture
def shown(qtbot):
    """The real window at 1280x800 on the demo model, shown and exposed (Probes in front of Details, Runs, Graph)."""
    from tests.ui.helpers import RecordingPrompts
    from workbench.ui.main_window import MainWindow

    win = MainWindow(prompts=RecordingPrompts())
    qtbot.addWidget(win)
    win.resize(1280, 800)
    win.show()
    qtbot.waitExposed(win)
    return win
