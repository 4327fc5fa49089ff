"""The Samples view: what a causal language model says while it learns, step by step.

A causal-LM run completes its prompts at every evaluation into the run folder's
``samples.jsonl`` (:mod:`workbench.core.train.task.samples`). This view shows
them: a step to read ("Step 120 · epoch 1"), and a step to compare with
(the previous evaluation by default, or none), with the words that changed
marked (added: underlined on a tint; removed: struck through). It follows the
window's run (``FitStarted`` names the folder; each ``EpochEnded`` and the end
read it again) and :meth:`show_run` opens any run folder.

While a causal LM's run goes (:meth:`follow` gave the run), "Sample now" queues a
:class:`~workbench.core.train.trainer.commands.SampleNow`: the trainer completes
the prompts between two steps, appends them marked on demand, and its
``CommandApplied`` makes the view read the file again ("Step 37 · epoch 1 · on demand").
"Compare with run…" lists the run folders holding a ``samples.jsonl`` (under the Runs
dock's root and beside the shown run) and compares each prompt's completion with the
chosen run's at its nearest step. Reading, grouping, listing and diffing are core's
(:func:`~workbench.core.train.task.samples.read_samples`,
:func:`~workbench.core.train.task.samples.runs_with_samples`,
:mod:`~workbench.core.train.task.sample_diff`); a file of rows is small (prompts x evaluations).
objectNames: ``samplesView``, ``samplesStepCombo``, ``samplesCompareCombo``, ``samplesText``,
``samplesNote``, ``samplesNowButton``, ``samplesRunButton``.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Callable

from PySide6.QtWidgets import (QComboBox, QHBoxLayout, QLabel, QMenu, QPushButton, QTextBrowser, QToolButton,
                               QVBoxLayout, QWidget)

from workbench.core.train.events import CommandApplied, EpochEnded, Finished, FitStarted
from workbench.core.train.runs.folder import default_runs_root
from workbench.core.train.task.sample_diff import SampleStep, compare_steps, compare_with_run, steps_of
from workbench.core.train.task.samples import SAMPLES_FILE, read_samples, runs_with_samples
from workbench.core.train.trainer.commands import SampleNow

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
        Its evaluations (and on-demand samples), ascending.
    other_run : Path or None
        The run compared with ("Compare with run…"); None: steps of the shown run are compared.
    other_steps : list of SampleStep
        That run's steps.
    runs_root : callable
        ``runs_root()``: the folder whose run folders "Compare with run…" lists (the Runs dock's root).
    """

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent, objectName="samplesView")
        self.run_dir: Path | None = None
        self.steps: list[SampleStep] = []
        self.other_run: Path | None = None
        self.other_steps: list[SampleStep] = []
        self.runs_root: Callable[[], str | Path | None] = default_runs_root
        self._run = None  # the window's RunController (follow()): where "Sample now" is queued
        self._can_sample = False  # the run followed completes prompts (FitStarted's info["samples"])
        self._asked = False  # a SampleNow is on its way
        self.step_combo = QComboBox(objectName="samplesStepCombo")
        self.compare_combo = QComboBox(objectName="samplesCompareCombo")
        self.step_combo.setToolTip("The evaluation whose completions are shown")
        self.compare_combo.setToolTip("The evaluation they are compared with: added words are underlined, removed "
                                      "ones struck through")
        self.text = QTextBrowser(objectName="samplesText")
        self.text.setOpenLinks(False)
        self.note = QLabel(objectName="samplesNote")
        self.note.setWordWrap(True)
        self.now_button = QPushButton("Sample now", objectName="samplesNowButton")
        self.now_button.clicked.connect(self.sample_now)
        self.run_button = QToolButton(objectName="samplesRunButton", text="Compare with run…")
        self.run_button.setToolTip("Compare each completion with another run's at its nearest step")
        self.run_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.run_menu = QMenu(self.run_button)
        self.run_menu.aboutToShow.connect(self._fill_run_menu)
        self.run_button.setMenu(self.run_menu)
        row = QHBoxLayout()
        row.addWidget(QLabel("Step"))
        row.addWidget(self.step_combo, 1)
        row.addWidget(QLabel("compared with"))
        row.addWidget(self.compare_combo, 1)
        buttons = QHBoxLayout()
        buttons.addWidget(self.now_button)
        buttons.addWidget(self.run_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(row)
        layout.addLayout(buttons)
        layout.addWidget(self.note)
        layout.addWidget(self.text, 1)
        self.step_combo.currentIndexChanged.connect(lambda _i: self._render())
        self.compare_combo.currentIndexChanged.connect(lambda _i: self._render())
        self.show_run(None)
        self._update_button()

    # -- following a run --------------------------------------------------------------
    def follow(self, run, runs_root: Callable[[], str | Path | None] | None = None) -> None:
        """Follow the window's run (a RunController: its ``event`` signal, its ``queue``) and list other runs
        under ``runs_root()`` (the Runs dock's root; default: the default runs folder)."""
        self._run = run
        run.event.connect(self.on_event)
        if runs_root is not None:
            self.runs_root = runs_root

    def on_event(self, event) -> None:
        """A run's event: ``FitStarted`` names the run folder; ``EpochEnded``, a ``SampleNow`` applied and
        ``Finished`` read it again."""
        if isinstance(event, FitStarted):
            run_dir = event.info.get("run_dir")
            self._can_sample, self._asked = event.info.get("samples") is True, False
            self.show_run(run_dir if run_dir else None)
        elif isinstance(event, CommandApplied) and isinstance(event.command, SampleNow):
            self._asked = False
            self.refresh(follow_last=not event.command.error)
            if event.command.error:
                self.note.setText(f"Sample now: {event.command.error}")
        elif isinstance(event, (EpochEnded, Finished)):
            if self.run_dir is not None:
                self.refresh()
            if isinstance(event, Finished):
                self._can_sample = self._asked = False
        else:
            return  # a metrics batch, a step's event: nothing here changes (not redone at every batch)
        self._update_button()

    def sample_now(self) -> None:
        """Queue a :class:`SampleNow` on the followed run (the prompts completed at its next step boundary)."""
        if self._run is None or not self._can_sample:
            return
        try:
            self._run.queue(SampleNow())
        except RuntimeError as exc:  # the run ended meanwhile
            self.note.setText(f"Sample now: {exc}")
            return
        self._asked = True
        self._update_button()

    def _update_button(self) -> None:
        self.now_button.setEnabled(self._run is not None and self._can_sample and not self._asked)
        self.now_button.setToolTip(
            "Sampling: the prompts are completed at the run's next step" if self._asked else
            "Complete the prompts now, between two steps (kept in samples.jsonl, marked on demand)"
            if self._can_sample else "While a causal language model trains: complete its prompts now")

    # -- another run ------------------------------------------------------------------
    def run_choices(self) -> list[Path]:
        """The run folders with a ``samples.jsonl`` under the runs root and beside the shown run (not it)."""
        roots = [r for r in (self.runs_root(), self.run_dir.parent if self.run_dir is not None else None) if r]
        return runs_with_samples(roots, exclude=self.run_dir)

    def compare_with_run(self, run_dir: str | Path | None) -> None:
        """Compare with ``run_dir``'s completions at its nearest steps (None: with a step of the shown run)."""
        self.other_run = Path(run_dir) if run_dir else None
        self.refresh()

    def _fill_run_menu(self) -> None:
        self.run_menu.clear()
        none = self.run_menu.addAction("No other run: compare steps of this one")
        none.setCheckable(True)
        none.setChecked(self.other_run is None)
        none.triggered.connect(lambda: self.compare_with_run(None))
        choices = self.run_choices()
        for path in choices:
            action = self.run_menu.addAction(path.name)
            action.setToolTip(str(path))
            action.setCheckable(True)
            action.setChecked(self.other_run is not None and path == self.other_run)
            action.triggered.connect(lambda _checked=False, p=path: self.compare_with_run(p))
        if not choices:
            self.run_menu.addAction(f"No other run folder with a {SAMPLES_FILE}").setEnabled(False)

    def show_run(self, run_dir: str | Path | None) -> None:
        """Show the samples of ``run_dir`` (None: none), the last evaluation against the one before."""
        self.run_dir = Path(run_dir) if run_dir else None
        if self.other_run is not None and self.other_run == self.run_dir:
            self.other_run = None  # a run is not compared with itself
        self.refresh(follow_last=True)

    def refresh(self, follow_last: bool | None = None) -> None:
        """Read ``samples.jsonl`` again; the last step stays selected when it was (or ``follow_last``)."""
        at_last = self.step_combo.currentIndex() in (-1, self.step_combo.count() - 1)
        follow = at_last if follow_last is None else follow_last
        chosen = self._chosen_step()
        self.steps = steps_of(read_samples(self.run_dir)) if self.run_dir is not None else []
        self.other_steps = steps_of(read_samples(self.other_run)) if self.other_run is not None else []
        for combo in (self.step_combo, self.compare_combo):
            combo.blockSignals(True)
        compare = self.compare_combo.currentText() or _PREVIOUS
        self.step_combo.clear()
        self.compare_combo.clear()
        self.compare_combo.addItems([_PREVIOUS, _NONE])
        for s in self.steps:
            label = f"Step {s.step} · epoch {s.epoch + 1}" + (" · on demand" if s.on_demand else "")
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
        shown = self.steps[current]
        self.compare_combo.setEnabled(self.other_run is None)
        on_demand = sum(s.on_demand for s in self.steps)
        counts = f"{len(self.steps) - on_demand} evaluations" + (f", {on_demand} on demand" if on_demand else "")
        if self.other_run is not None:
            diffs, against = compare_with_run(shown, self.other_steps), None
            said = f"; changes against run {self.other_run.name} at its nearest steps"
        else:
            against = self._against(current)
            diffs = compare_steps(shown, against)
            said = f"; changes against step {against.step}" if against is not None else ""
        self.note.setText(f"{self.run_dir.name}: {counts}, {len(shown.completions)} prompts{said}")
        parts = []
        for d in diffs:
            body = "".join(_marked(op, text) for op, text in d.pieces)
            where = ""
            if self.other_run is not None:
                where = (f"{self.other_run.name}, step {d.against_step}" if d.against_step is not None
                         else f"not in {self.other_run.name}")
                where = f" <span style='color: gray'>({_escaped(where)})</span>"
            parts.append(f"<p><b>{_escaped(d.prompt)}</b>{body}{where}</p>")
        self.text.setHtml("".join(parts))


def _escaped(text: str) -> str:
    return html.escape(text).replace("\n", "<br>")


def _marked(op: str, text: str) -> str:
    if op == "same":
        return _escaped(text)
    if op == "added":
        return f"<u style='background-color: rgba(46, 160, 67, 0.25)'>{_escaped(text)}</u>"
    return f"<s style='color: #b35900'>{_escaped(text)}</s>"
