"""Task › Completions: greedy or sampled at a temperature, read to and from ``[task]`` 1:1."""

from __future__ import annotations

import dataclasses

from PySide6.QtWidgets import QFormLayout, QWidget

from workbench.core.train.config import TaskConfig
from workbench.ui.train.task_fields import TaskFields


def test_completions_row_reads_back_do_sample_and_temperature_and_shows_for_causal_lm_only(qtbot):
    host = QWidget()
    qtbot.addWidget(host)
    form = QFormLayout(host)
    fields = TaskFields()
    fields.lay_out(form)
    fields.show(dataclasses.replace(TaskConfig(), kind="causal_lm", do_sample=True, temperature=0.7))
    assert form.isRowVisible(fields.sampling_combo.parentWidget())
    assert fields.temperature_spin.isEnabled()
    task = fields.read(TaskConfig())
    assert (task.do_sample, task.temperature) == (True, 0.7)
    fields.sampling_combo.setCurrentIndex(0)
    assert not fields.temperature_spin.isEnabled() and fields.read(TaskConfig()).do_sample is False
    fields.show(dataclasses.replace(TaskConfig(), kind="text_classification"))
    assert not form.isRowVisible(fields.sampling_combo.parentWidget())
