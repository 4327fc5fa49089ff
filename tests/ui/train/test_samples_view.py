"""The Samples view: a causal LM's completions per evaluation, the changed words marked; the Prompts field."""

from __future__ import annotations

import json

from PySide6.QtCore import QObject, Qt, Signal

from tests.ui.helpers import pause_and_sync
from workbench.core.train.config import TaskConfig
from workbench.core.train.events import CommandApplied, EpochEnded, Finished, FitStarted
from workbench.core.train.task.samples import read_samples
from workbench.core.train.trainer.commands import SampleNow
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
    view = window.samples_view
    assert not view.now_button.isEnabled()  # no run yet
    with qtbot.waitSignal(panel.runningChanged, timeout=60_000):
        assert panel.start(), window.errors
    # "Sample now" while the run is paused before its first evaluation: applied by the training process
    assert not panel.in_process()
    pause_and_sync(qtbot, panel)
    assert view.now_button.isEnabled()
    qtbot.mouseClick(view.now_button, Qt.MouseButton.LeftButton)
    assert not view.now_button.isEnabled()  # one press at a time, until it comes back
    qtbot.waitUntil(lambda: any(s.on_demand for s in view.steps), timeout=30_000)
    (asked,) = [s for s in view.steps if s.on_demand]
    assert view.step_combo.currentText() == f"Step {asked.step} · epoch 1 · on demand"
    assert set(asked.completions) == {"the cat", "the dog chases"} and "the dog chases" in view.text.toPlainText()
    assert view.now_button.isEnabled()
    panel.resume()
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=150_000)
    assert panel.last_reason() == "completed", window.errors
    assert not view.now_button.isEnabled()
    qtbot.waitUntil(lambda: view.step_combo.count() == 3, timeout=10_000)
    evaluated = [s.step for s in view.steps if not s.on_demand]
    assert len(evaluated) == 2 and asked.step < evaluated[0]  # not an evaluation's step: its own line
    assert set(view.steps[-1].completions) == {"the cat", "the dog chases"}
    text = view.text.toPlainText()
    assert "the cat" in text and "the dog chases" in text
    assert view.run_dir == tmp_path / "run"
    on_demand = [r for r in read_samples(view.run_dir) if r.get("on_demand")]
    assert [(r["step"], r["prompt"]) for r in on_demand] == [(asked.step, "the cat"), (asked.step, "the dog chases")]


class _Run(QObject):
    """What the view asks of the window's run: its ``event`` signal and ``queue`` (kept here)."""

    event = Signal(object)

    def __init__(self):
        super().__init__()
        self.queued: list = []

    def queue(self, command) -> None:
        self.queued.append(command)


def test_sample_now_and_compare_with_another_run(qtbot, tmp_path):
    """The button follows the run; an applied SampleNow (or its one-line refusal) shows; another run folder's
    completions are compared at its nearest step, the words it said struck through."""
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "no-samples"
    for folder in (a, b, c):
        folder.mkdir()
    _write(a, [{"step": 10, "epoch": 0, "prompt": "Once upon", "completion": " a time"},
               {"step": 14, "epoch": 1, "prompt": "Once upon", "completion": " a cat", "on_demand": True}])
    _write(b, [{"step": 8, "epoch": 0, "prompt": "Once upon", "completion": " a dog"},
               {"step": 30, "epoch": 2, "prompt": "Once upon", "completion": " the end"}])
    view, run = SamplesView(), _Run()
    qtbot.addWidget(view)
    view.follow(run, lambda: tmp_path)
    assert not view.now_button.isEnabled()
    run.event.emit(FitStarted({"run_dir": str(a), "samples": True}))
    assert view.now_button.isEnabled() and view.step_combo.currentText() == "Step 14 · epoch 2 · on demand"
    view.now_button.click()
    assert isinstance(run.queued[-1], SampleNow) and not view.now_button.isEnabled()
    run.event.emit(CommandApplied(SampleNow(error="no prompts yet: type some in Task › Prompts"), 14, 1.5))
    assert view.note.text() == "Sample now: no prompts yet: type some in Task › Prompts"
    assert view.now_button.isEnabled()
    # compare with another run: the chooser lists the run folders with samples.jsonl, not this one
    view.run_menu.aboutToShow.emit()
    names = [action.text() for action in view.run_menu.actions()]
    assert names[1:] == ["b"] and view.run_choices() == [b]
    view.run_menu.actions()[1].trigger()
    assert view.other_run == b and not view.compare_combo.isEnabled()
    html = view.text.toHtml()
    assert "line-through" in html and "underline" in html and "b, step 8" in view.text.toPlainText()
    assert "changes against run b" in view.note.text()
    view.step_combo.setCurrentIndex(0)  # step 10: b's nearest is 8
    assert "b, step 8" in view.text.toPlainText()
    view.compare_with_run(None)
    assert view.compare_combo.isEnabled() and "b, step" not in view.text.toPlainText()
    run.event.emit(Finished("completed"))
    assert not view.now_button.isEnabled()
