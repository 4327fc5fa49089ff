"""The real window attaching to a hostile peer through File > Attach (issue 45, "Safe on the new surfaces too"):
whatever a peer sends, the window says one line, no exception escapes a slot (pytest-qt fails the test on one),
and the GUI thread never stalls 2 s; the busy dialog's Cancel closes the connection."""

from __future__ import annotations

import time

import numpy as np
import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QProgressDialog, QPushButton

from tests.core.attach.peers import MINIMAL_INFO, FakePeer, event_frame, sends, trickle, welcome_frame
from tests.ui.helpers import RecordingPrompts
from workbench.core.probe.callback import ProbeReport
from workbench.core.probe.layer_stats import QUANTITIES, LayerSnapshot
from workbench.core.probe.stats import Histogram
from workbench.core.train.events import EpochEnded, FitStarted, Metrics, Sink
from workbench.ui.main_window import MainWindow

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("no_dangling_qthreads")]

STALL_S = 2.0


class _Ticks:
    """A 50 ms timer on the GUI thread: the longest gap between its ticks is the longest stall."""

    def __init__(self):
        self.last = time.monotonic()
        self.longest = 0.0
        self.timer = QTimer()
        self.timer.timeout.connect(self._tick)
        self.timer.start(50)

    def _tick(self) -> None:
        now = time.monotonic()
        self.longest = max(self.longest, now - self.last)
        self.last = now


@pytest.fixture
def window(qtbot):
    w = MainWindow(prompts=RecordingPrompts())
    qtbot.addWidget(w)
    w.resize(1280, 800)
    w.show()
    w.ticks = _Ticks()
    yield w
    w.ticks.timer.stop()
    w.training_panel.shutdown(ask=False)


def _attach_from_the_file_menu(window, peer) -> None:
    window.prompts.answers["attach_target"] = (peer.address, "token")
    window.attach_action.trigger()  # the slot: an exception raised in it fails the test (pytest-qt)


def _deep(levels: int) -> dict:
    names = [""] + [".".join(["m"] * i) for i in range(1, levels + 1)]
    return dict(MINIMAL_INFO, model={"modules": [[n, "Deep"] for n in names], "params": [], "buffers": []})


@pytest.mark.parametrize("info, fragment", [
    (_deep(5_000), "bytes refused (limit 16,777,216)"),  # 25 MB of names: past the welcome's size
    (_deep(2_000), "levels deep (limit 64)"),
    (dict(MINIMAL_INFO, lrs=["fast"]), "['lrs'][0]: expected a number"),
    (dict(MINIMAL_INFO, step="forty", pid="me"), "expected an integer"),
], ids=["5000-deep", "2000-deep", "text-lr", "text-step"])
def test_a_hostile_welcome_is_one_line_in_the_window(qtbot, window, info, fragment):
    before = window.model
    with FakePeer(sends(welcome_frame(info))) as peer:
        _attach_from_the_file_menu(window, peer)
        assert peer.closed.wait(5)
    assert len(window.prompts.errors) == 1, window.prompts.errors
    line = window.prompts.errors[0]
    assert "\n" not in line and fragment in line, line
    assert not window.training_panel.is_running() and window.model is before
    assert window.ticks.longest < STALL_S


#: lists where arrays belong, text where numbers belong: each reached a slot of the unfixed window
BAD_EVENTS = [
    Metrics({"step": [1.0, 2.0], "loss": [0.5, 0.4]}),
    Metrics({"step": np.arange(2.0), "loss": [0.5, 0.4], "time": [0.1, 0.2]}),
    EpochEnded({"epoch": 0, "step": 2, "skipped": "abc", "val_loss": "low"}),
    FitStarted({"total_steps": "many", "steps_per_epoch": "some", "history": "none"}),
    Sink(0, [ProbeReport(step=1, weight_histograms={"fc.weight": Histogram([1, 2], 0.0, 1.0)})]),
    Sink(0, [ProbeReport(step=1, layers=LayerSnapshot(1, ("fc",), ("Linear",), [[0.0] * len(QUANTITIES)]))]),
]


def test_hostile_events_are_one_line_in_the_window(qtbot, window):
    good = FitStarted({"epoch": 0, "step": 0, "epochs": 0, "run_dir": "/nonexistent", "history": []})
    frames = [welcome_frame(MINIMAL_INFO), event_frame(good), *map(event_frame, BAD_EVENTS)]
    with FakePeer(sends(*frames)) as peer:
        _attach_from_the_file_menu(window, peer)
        qtbot.waitUntil(lambda: bool(window.prompts.errors) and not window.training_panel.is_running(),
                        timeout=30_000)
        assert peer.closed.wait(5)
    assert len(window.prompts.errors) == 1, window.prompts.errors
    line = window.prompts.errors[0]
    assert "\n" not in line and "Metrics.values['step']: expected a 1-D array" in line, line
    assert window.ticks.longest < STALL_S


def test_the_busy_dialog_cancel_closes_the_connection(qtbot, window):
    def press_cancel():
        dialog = window.findChild(QProgressDialog, "busyDialog")
        assert dialog is not None and dialog.isVisible()  # shown after 400 ms of waiting
        qtbot.mouseClick(dialog.findChild(QPushButton), Qt.MouseButton.LeftButton)
        pressed.append(time.monotonic())

    pressed: list = []
    with FakePeer(trickle(welcome_frame(MINIMAL_INFO), 0.3)) as peer:  # the whole welcome would take minutes
        QTimer.singleShot(1000, press_cancel)
        start = time.monotonic()
        _attach_from_the_file_menu(window, peer)
        returned = time.monotonic()
        assert peer.closed.wait(5)
    assert pressed and returned - pressed[0] < 1.0 and returned - start < 3.0
    assert window.prompts.errors == [] and "cancelled" in window.statusBar().currentMessage()
    assert not window.training_panel.is_running() and window.ticks.longest < STALL_S
