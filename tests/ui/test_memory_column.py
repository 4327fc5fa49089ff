"""Will it fit, in the window: the tree's Memory column and the run bar's fit line follow the Training settings.

The estimate runs in core on a worker thread (``ui.memory_feed``); the test waits
for it, then checks the figures against the core estimate of the same model and
settings, so a column that showed stale or made-up numbers would fail.
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from workbench.core.formatting import format_bytes
from workbench.core.model.example_input import example_input
from workbench.core.model.memory import estimate_memory
from workbench.ui.model.tree_model import CHECK, COL_MEMORY, COL_TRAIN, TOOLTIP
from workbench.ui.model.tree_view import CHOOSABLE_COLUMNS

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


def _settled(win, qtbot) -> None:
    qtbot.waitUntil(lambda: win.memory_feed.is_idle() and win.tree_model.memory is not None, timeout=10_000)


def _core(win, **kw):
    settings = win.training_panel.settings
    return estimate_memory(win.model, example_input(win.model, win.session.input_shape),
                           batch_size=settings.batch_spin.value(), optimizer=settings.optimizer_combo.currentData(),
                           momentum=settings.momentum_spin.value(), device="cpu", **kw)


def test_memory_column_and_fit_line_follow_batch_and_freezing(shown, qtbot):
    win = shown
    tm, settings = win.tree_model, win.training_panel.settings
    fit = win.training_panel.run_bar.fit_line
    # hidden by default (the fit line has the total), shown from the header menu
    assert COL_MEMORY in CHOOSABLE_COLUMNS and win.tree_widget.view.isColumnHidden(COL_MEMORY)
    win.tree_widget.set_column_shown(COL_MEMORY, True)
    assert not win.tree_widget.view.isColumnHidden(COL_MEMORY)
    _settled(win, qtbot)
    assert win.memory_feed.last_error is None
    core = _core(win)
    root = tm.index(0, COL_MEMORY)
    assert root.data() == format_bytes(core.total_bytes) and core.total_bytes > 0
    assert tm.memory.modules == core.modules  # every module, not just the root
    assert fit.isVisible() and fit.full_text.startswith(f"Memory: {format_bytes(core.total_bytes)} of ")
    assert fit.full_text.endswith("free on cpu — fits") and fit.fits is True and "\n" not in fit.full_text
    assert fit.toolTip().startswith(fit.full_text)

    # a larger batch: more activations, the same weights; the column and the line follow
    settings.batch_spin.setValue(settings.batch_spin.value() * 4)
    qtbot.waitUntil(lambda: tm.memory is not None and tm.memory.batch_size == settings.batch_spin.value(),
                    timeout=10_000)
    _settled(win, qtbot)
    bigger = _core(win)
    assert bigger.root.activations_bytes > core.root.activations_bytes
    assert root.data() == format_bytes(bigger.total_bytes) != format_bytes(core.total_bytes)
    assert fit.full_text.startswith(f"Memory: {format_bytes(bigger.total_bytes)} of ")

    # freeze a module: no gradients or optimizer state for it, in the tooltip of its Memory cell
    conv = tm.index_for_name("features.0", COL_MEMORY)
    before = tm.memory_of("features.0")
    assert before.optimizer_bytes > 0 and f"optimizer state (adam) {format_bytes(before.optimizer_bytes)}" in \
        conv.data(TOOLTIP)
    tm.setData(tm.index_for_name("features.0", COL_TRAIN), Qt.CheckState.Unchecked, CHECK)
    assert not win.model.features[0].weight.requires_grad
    qtbot.waitUntil(lambda: (m := tm.memory_of("features.0")) is not None and m.optimizer_bytes == 0,
                    timeout=10_000)
    _settled(win, qtbot)
    tip = conv.data(TOOLTIP)
    assert "optimizer state (adam) 0 B" in tip and "gradients 0 B" in tip
    assert tm.memory.modules == _core(win).modules


def test_a_step_that_cannot_fit_says_what_would(shown, qtbot, monkeypatch):
    """Against a device with little free memory the line says so and names the changes (fit_summary's ideas)."""
    import workbench.core.model.memory as memory

    win = shown
    _settled(win, qtbot)
    need = win.tree_model.memory.total_bytes
    monkeypatch.setattr(memory, "device_memory", lambda device: (need // 2, need))
    win.training_panel.settings.amp_check.setChecked(False)
    win.memory_feed.schedule()
    _settled(win, qtbot)
    fit = win.training_panel.run_bar.fit_line
    assert " — does not fit: try batch " in fit.full_text and fit.fits is False
    assert "does not fit. It would fit with:" in fit.toolTip()
    assert fit.text() == fit.full_text or fit.text().endswith("…")  # one line, elided to its width


def test_every_column_of_resnet18_shows_at_1280x800(shown, qtbot):
    """With the Memory column, resnet18's wide counts had pushed Memory 23 px past the edge (Name at 26 px):
    Type and Output shape give the room instead, eliding their text."""
    import torchvision

    from workbench.ui.model.tree_model import COL_NAME, COLUMNS
    from workbench.ui.model.tree_view import NAME_LEAST_WIDTH, SHRINK_FLOORS

    win = shown
    win.training_panel.settings.batch_spin.setValue(8)  # a smaller fake forward: the columns are the point here
    win.session.set_model(torchvision.models.resnet18(), None, None, (1, 3, 224, 224), source="resnet18")
    win.tree_widget.set_column_shown(COL_MEMORY, True)  # shown from the header menu: every column still fits
    _settled(win, qtbot)
    view = win.tree_widget.view
    header = view.header()

    def in_view() -> dict:
        return {COLUMNS[c]: (header.sectionViewportPosition(c), header.sectionSize(c)) for c in range(header.count())
                if not view.isColumnHidden(c)}

    qtbot.waitUntil(lambda: all(0 <= x and x + w <= view.viewport().width() for x, w in in_view().values()),
                    timeout=3000)
    assert set(in_view()) == set(COLUMNS) - {"Change"} and view.horizontalScrollBar().maximum() == 0
    assert header.sectionSize(COL_NAME) >= NAME_LEAST_WIDTH
    assert all(header.sectionSize(c) >= floor for c, floor in SHRINK_FLOORS.items())
    assert win.tree_model.memory.batch_size == 8 and win.tree_model.index(0, COL_MEMORY).data().endswith(" MB")

    # activation checkpointing ticked: the fit line gives what a checkpointed run keeps (core's figure), less
    before = win.tree_model.memory
    win.training_panel.settings.activation_ckpt_check.setChecked(True)
    qtbot.waitUntil(lambda: win.tree_model.memory is not before, timeout=10_000)
    _settled(win, qtbot)
    example = example_input(win.model, win.session.input_shape)
    kept = estimate_memory(win.model, example, batch_size=8, optimizer=win.training_panel.settings.optimizer_combo
                           .currentData(), momentum=win.training_panel.settings.momentum_spin.value(), device="cpu",
                           activation_checkpointing=True)
    assert win.tree_model.memory.total_bytes == kept.total_bytes < before.total_bytes
    assert win.training_panel.run_bar.fit_line.full_text.startswith(f"Memory: {format_bytes(kept.total_bytes)} of ")
