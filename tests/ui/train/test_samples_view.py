"""The Samples view: a causal LM's completions per evaluation, the changed words marked; the Prompts field."""

from __future__ import annotations

import json

from workbench.core.train.config import TaskConfig
from workbench.core.train.events import EpochEnded, FitStarted
from workbench.ui.train.samples_view import SamplesView
from workbench.ui.train.task_fields import TaskFields


def _write(run_dir, rows):
    with open(run_dir / "samples.jsonl", "a", encoding="utf-8") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))


def test_the_view_follows_the_run_and_marks_what_changed_since_the_previous_evaluation(qtbot, tmp_path):
    view = SamplesView()
    qtbot.addWidget(view)
    assert "samples.jsonl" in view.note.text() and view.step_combo.count() == 0
    _write(tmp_path, [{"step": 10, "epoch": 0, "prompt": "Once upon", "completion": " a cat <b>"},
                      {"step": 10, "epoch": 0, "prompt": "The dog", "completion": " ran"}])
    view.on_event(FitStarted({"run_dir": str(tmp_path)}))
    assert view.step_combo.count() == 1 and view.step_combo.currentText() == "Step 10 · epoch 1"
    html = view.text.toHtml()
    assert "Once upon" in html and "&lt;b&gt;" in html  # the model's text is text, never markup
    _write(tmp_path, [{"step": 20, "epoch": 1, "prompt": "Once upon", "completion": " a time <b>"},
                      {"step": 20, "epoch": 1, "prompt": "The dog", "completion": " ran"}])
    view.on_event(EpochEnded({"epoch": 1, "step": 20}))
    assert view.step_combo.count() == 2 and view.step_combo.currentData() == 20  # the newest, followed
    first = view.text.document().findBlockByNumber(0).text()
    assert first.startswith("Once upon a") and "time" in first and "step 10" in view.note.text()
    marked = view.text.toHtml()
    assert "line-through" in marked and "underline" in marked  # "cat" struck, "time" added
    view.compare_combo.setCurrentIndex(view.compare_combo.findText("nothing"))
    assert "line-through" not in view.text.toHtml() and "underline" not in view.text.toHtml()
    view.step_combo.setCurrentIndex(0)  # an older step stays chosen when the run writes more
    _write(tmp_path, [{"step": 30, "epoch": 2, "prompt": "Once upon", "completion": " a time there"}])
    view.on_event(EpochEnded({"epoch": 2, "step": 30}))
    assert view.step_combo.count() == 3 and view.step_combo.currentData() == 10


def test_the_prompts_field_is_shown_for_a_causal_lm_and_read_into_the_task(qtbot):
    from PySide6.QtWidgets import QFormLayout, QWidget

    host = QWidget()
    qtbot.addWidget(host)
    form = QFormLayout(host)
    fields = TaskFields()
    fields.lay_out(form)
    fields.show(TaskConfig(kind="classification"))
    assert not form.isRowVisible(fields.prompts_edit)
    fields.show(TaskConfig(kind="causal_lm", prompts=["Once upon a time", "a, b and c"]))
    assert form.isRowVisible(fields.prompts_edit)
    assert fields.prompts_edit.text() == "Once upon a time | a, b and c"
    fields.prompts_edit.setText(" The cat |  | In 1990, ")
    assert fields.read(TaskConfig()).prompts == ["The cat", "In 1990,"]


def test_a_causal_lm_trained_from_the_window_shows_its_prompts_completed_in_the_samples_tab(window, qtbot, tmp_path):
    """Issue 40's "see it learn", in the window: the Prompts typed in Task are completed at every evaluation,
    kept in samples.jsonl and shown in the Samples tab, one step per epoch."""
    from tests.core.train.text_models import STORY, tiny_llama_folder

    folder = tiny_llama_folder(tmp_path / "llama")
    (tmp_path / "story.txt").write_text(STORY * 2)
    assert window.open_path(folder), window.errors
    panel = window.training_panel
    form = panel.settings
    assert form.task_fields.kind_combo.currentData() == "causal_lm"
    form.root_edit.setText(str(tmp_path / "story.txt"))
    form.task_fields.prompts_edit.setText("the cat | the dog chases")
    form.source_fields.max_length_spin.setValue(16)
    form.batch_spin.setValue(8)
    form.epochs_spin.setValue(2)
    form.lr_spin.setValue(3e-3)
    form.run_dir_edit.setText(str(tmp_path / "run"))
    with qtbot.waitSignal(panel.runningChanged, timeout=60_000):
        assert panel.start(), window.errors
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=150_000)
    assert panel.last_reason() == "completed", window.errors
    view = window.samples_view
    qtbot.waitUntil(lambda: view.step_combo.count() == 2, timeout=10_000)
    assert set(view.steps[-1].completions) == {"the cat", "the dog chases"}
    text = view.text.toPlainText()
    assert "the cat" in text and "the dog chases" in text
    assert view.run_dir == tmp_path / "run"
