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
