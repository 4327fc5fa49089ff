"""The Samples view: what a causal language model says while it learns, step by step.

A causal-LM run completes its prompts at every evaluation into the run folder's
``samples.jsonl`` (:mod:`workbench.core.train.task.samples`). This view shows
them: a step to read ("Step 120 · epoch 1"), and a step to compare with
(the previous evaluation by default, or none), with the words that changed
marked (added: underlined on a tint; removed: struck through). It follows the
window's run (``FitStarted`` names the folder; each ``EpochEnded`` and the end
read it again) and :meth:`show_run` opens any run folder. Reading and grouping
the rows is core's (:func:`~workbench.core.train.task.samples.read_samples`,
:mod:`~workbench.core.train.task.sample_diff`); a file of
:data:`~workbench.core.train.task.sample_diff` rows is small (prompts x evaluations).
objectNames: ``samplesView``, ``samplesStepCombo``, ``samplesCompareCombo``, ``samplesText``,
``samplesNote``.
"""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QTextBrowser, QVBoxLayout, QWidget

from workbench.core.train.events import EpochEnded, Finished, FitStarted
from workbench.core.train.task.sample_diff import SampleStep, steps_of, word_diff
from workbench.core.train.task.samples import SAMPLES_FILE, read_samples

__all__ = ["SamplesView"]

_PREVIOUS = "previous evaluation"
_NONE = "nothing"


class SamplesView(QWidget):
    """Prompts and completions of one evaluation, the changed words against another marked.

    Parameters
    ----------
    parent : QWidget, optional

    Attributes
    ----------
    run_dir : Path or None
        The run folder shown.
    steps : list of SampleStep
        Its evaluations, ascending.
    """

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent, objectName="samplesView")
        self.run_dir: Path | None = None
        self.steps: list[SampleStep] = []
        self.step_combo = QComboBox(objectName="samplesStepCombo")
        self.compare_combo = QComboBox(objectName="samplesCompareCombo")
        self.step_combo.setToolTip("The evaluation whose completions are shown")
        self.compare_combo.setToolTip("The evaluation they are compared with: added words are underlined, removed "
                                      "ones struck through")
        self.text = QTextBrowser(objectName="samplesText")
        self.text.setOpenLinks(False)
        self.note = QLabel(objectName="samplesNote")
        self.note.setWordWrap(True)
        row = QHBoxLayout()
        row.addWidget(QLabel("Step"))
        row.addWidget(self.step_combo, 1)
        row.addWidget(QLabel("compared with"))
        row.addWidget(self.compare_combo, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(row)
        layout.addWidget(self.note)
        layout.addWidget(self.text, 1)
        self.step_combo.currentIndexChanged.connect(lambda _i: self._render())
        self.compare_combo.currentIndexChanged.connect(lambda _i: self._render())
        self.show_run(None)

    # -- following a run --------------------------------------------------------------
    def on_event(self, event) -> None:
        """A run's event: ``FitStarted`` names the run folder; ``EpochEnded`` and ``Finished`` read it again."""
        if isinstance(event, FitStarted):
            run_dir = event.info.get("run_dir")
            self.show_run(run_dir if run_dir else None)
        elif isinstance(event, (EpochEnded, Finished)) and self.run_dir is not None:
            self.refresh()

    def show_run(self, run_dir: str | Path | None) -> None:
        """Show the samples of ``run_dir`` (None: none), the last evaluation against the one before."""
        self.run_dir = Path(run_dir) if run_dir else None
        self.refresh(follow_last=True)

    def refresh(self, follow_last: bool | None = None) -> None:
        """Read ``samples.jsonl`` again; the last step stays selected when it was (or ``follow_last``)."""
        at_last = self.step_combo.currentIndex() in (-1, self.step_combo.count() - 1)
        follow = at_last if follow_last is None else follow_last
        chosen = self._chosen_step()
        self.steps = steps_of(read_samples(self.run_dir)) if self.run_dir is not None else []
        for combo in (self.step_combo, self.compare_combo):
            combo.blockSignals(True)
        compare = self.compare_combo.currentText() or _PREVIOUS
        self.step_combo.clear()
        self.compare_combo.clear()
        self.compare_combo.addItems([_PREVIOUS, _NONE])
        for s in self.steps:
            label = f"Step {s.step} · epoch {s.epoch + 1}"
            self.step_combo.addItem(label, s.step)
            self.compare_combo.addItem(label, s.step)
        index = len(self.steps) - 1 if follow or chosen is None else self.step_combo.findData(chosen)
        self.step_combo.setCurrentIndex(max(index, 0) if self.steps else -1)
        self.compare_combo.setCurrentIndex(max(self.compare_combo.findText(compare), 0))
        for combo in (self.step_combo, self.compare_combo):
            combo.blockSignals(False)
        self._render()

    # -- drawing ----------------------------------------------------------------------
    def _chosen_step(self) -> int | None:
        data = self.step_combo.currentData()
        return data if isinstance(data, int) else None

    def _against(self, current: int) -> SampleStep | None:
        choice = self.compare_combo.currentText()
        if choice == _NONE:
            return None
        if choice == _PREVIOUS:
            return self.steps[current - 1] if current > 0 else None
        step = self.compare_combo.currentData()
        return next((s for s in self.steps if s.step == step), None)

    def _render(self) -> None:
        if self.run_dir is None or not self.steps:
            self.note.setText("A causal language model's run completes its prompts at every evaluation "
                              f"(Task › Prompts); they are kept in the run folder's {SAMPLES_FILE} and shown here."
                              if self.run_dir is None else f"No samples yet in {self.run_dir.name}/{SAMPLES_FILE}.")
            self.text.clear()
            return
        current = max(self.step_combo.currentIndex(), 0)
        shown, against = self.steps[current], self._against(current)
        self.note.setText(f"{self.run_dir.name}: {len(self.steps)} evaluations, "
                          f"{len(shown.completions)} prompts"
                          + (f"; changes against step {against.step}" if against is not None else ""))
        parts = []
        for prompt, completion in shown.completions.items():
            before = against.completions.get(prompt) if against is not None else None
            body = _escaped(completion) if before is None else "".join(
                _marked(op, text) for op, text in word_diff(before, completion))
            parts.append(f"<p><b>{_escaped(prompt)}</b>{body}</p>")
        self.text.setHtml("".join(parts))


def _escaped(text: str) -> str:
    return html.escape(text).replace("\n", "<br>")


def _marked(op: str, text: str) -> str:
    if op == "same":
        return _escaped(text)
    if op == "added":
        return f"<u style='background-color: rgba(46, 160, 67, 0.25)'>{_escaped(text)}</u>"
    return f"<s style='color: #b35900'>{_escaped(text)}</s>"
