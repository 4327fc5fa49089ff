"""The Task section of the training settings: what a run optimizes and reports (``[task]`` of run.toml).

:class:`TaskFields` holds one widget per :class:`~workbench.core.train.config.TaskConfig`
field (``files`` excepted: the run writes it) and reads them back 1:1:
the kind, the user's training and validation steps, the loss, the metrics, and
the metric ``best.pt`` follows with its direction.
"""

from __future__ import annotations

import dataclasses

from PySide6.QtWidgets import QComboBox, QCompleter, QDoubleSpinBox, QFormLayout, QHBoxLayout, QLabel, QLineEdit, QWidget

from workbench.core.train.config import TaskConfig
from workbench.core.train.task.losses import LOSS_NAMES
from workbench.core.train.task.metrics import BUILTIN_METRICS, DEFAULT_METRICS, column
from workbench.ui.train.collapsible import line_edit

__all__ = ["TaskFields", "TASK_KINDS", "MAXIMIZED", "PROMPT_SEPARATOR"]

#: (label, TaskConfig.kind) in combo order.
TASK_KINDS = [("Auto (the data's own)", "auto"), ("Classification", "classification"),
              ("Regression", "regression"), ("Multi-label", "multilabel"),
              ("The model returns its loss", "model_loss"), ("Text classification", "text_classification"),
              ("Token classification", "token_classification"), ("Causal language model", "causal_lm"),
              ("Image classification", "image_classification")]
#: Separates the prompts in the Prompts field (a comma is common inside a prompt; " | " is not).
PROMPT_SEPARATOR = "|"
#: Monitor metrics for which larger is better: choosing one sets the mode to max.
MAXIMIZED = {"val_acc", "val_accuracy", "val_top5", "val_r2", "val_f1", "val_map"}
_MONITORS = ["val_loss", *dict.fromkeys(column(name) for name in BUILTIN_METRICS), "train_loss"]


class TaskFields:
    """The Task section's widgets (see the module docstring); :meth:`lay_out` puts them in a form.

    Attributes
    ----------
    kind_combo, step_edit, validation_step_edit, loss_edit, metrics_edit, monitor_combo, mode_combo
        objectNames ``taskKindCombo``, ``stepEdit``, ``validationStepEdit``, ``lossSpecEdit``,
        ``metricsEdit``, ``monitorCombo`` (editable) and ``modeCombo``.
    prompts_edit : QLineEdit
        ``promptsEdit``: a causal language model's prompts (``[task] prompts``), separated by
        :data:`PROMPT_SEPARATOR`; its row is shown for that task only.
    sampling_combo, temperature_spin
        ``samplingCombo`` (greedy / sampled: ``[task] do_sample``) and ``temperatureSpin``
        (``[task] temperature``, enabled when sampled), in the Completions row shown with the prompts.
    code_note : QLabel
        ``codeSpecNote``: shown while settings read from a file name code that has not been confirmed.
    """

    def __init__(self):
        self.kind_combo = QComboBox(objectName="taskKindCombo")
        for text, key in TASK_KINDS:
            self.kind_combo.addItem(text, key)
        self.kind_combo.setToolTip("The built-in task: its loss, target format and default metrics. Auto: a CSV's "
                                   "inferred task, else classification")
        self.step_edit = line_edit("stepEdit", "built in; or my_task.py:training_step",
                                   "Your training step: a function (model, batch) -> loss or {'loss': loss, "
                                   "'<metric>': value, ...}, as file.py:function or package.module:function")
        self.validation_step_edit = line_edit("validationStepEdit", "the training step, without gradients",
                                              "Your validation step, of the same form (optional)")
        self.loss_edit = line_edit("lossSpecEdit", "the task's default",
                                   f"The criterion loss(output, target): {', '.join(LOSS_NAMES)}, or a spec such as "
                                   "my_loss.py:FocalLoss (a class is built without arguments). Empty: the Loss of "
                                   "Optimization for classification, else the task's default")
        completer = QCompleter(list(LOSS_NAMES), self.loss_edit)
        completer.setCompletionMode(QCompleter.CompletionMode.InlineCompletion)  # no popup over the form
        self.loss_edit.setCompleter(completer)
        self.metrics_edit = line_edit("metricsEdit", "the task's defaults",
                                      f"Validation metrics, comma-separated: {', '.join(BUILTIN_METRICS)}, or specs "
                                      "of metric(output, target) -> number. Empty: the task's defaults")
        self.monitor_combo = QComboBox(objectName="monitorCombo")
        self.monitor_combo.setEditable(True)
        self.monitor_combo.addItems(_MONITORS)
        self.monitor_combo.setToolTip("The epoch metric best.pt follows (a column of metrics.csv, e.g. val_loss, "
                                      "val_r2, or val_<name> of a metric your step returns)")
        self.mode_combo = QComboBox(objectName="modeCombo")
        self.mode_combo.addItem("min (smaller is better)", "min")
        self.mode_combo.addItem("max (larger is better)", "max")
        self.prompts_edit = line_edit("promptsEdit", "the first words of the first validation rows",
                                      "Texts the model completes at every evaluation, kept in the run "
                                      f"folder's samples.jsonl and shown in the Samples tab; several separated by "
                                      f"'{PROMPT_SEPARATOR}'")
        self.sampling_combo = QComboBox(objectName="samplingCombo")
        self.sampling_combo.addItem("Greedy", False)
        self.sampling_combo.addItem("Sampled", True)
        self.sampling_combo.setToolTip("How the prompts are completed: greedy (the same text for the same weights) "
                                       "or sampled at the temperature, from [task] sample_seed (the same noise at "
                                       "every evaluation)")
        self.temperature_spin = QDoubleSpinBox(objectName="temperatureSpin", decimals=2, minimum=0.05, maximum=5.0,
                                               singleStep=0.1, value=1.0)
        self.temperature_spin.setPrefix("temperature ")
        self.temperature_spin.setToolTip("The sampling temperature: below 1 sharper, above 1 more varied")
        self._completions = QWidget(objectName="completionsRow")
        row = QHBoxLayout(self._completions)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.sampling_combo)
        row.addWidget(self.temperature_spin, 1)
        self.sampling_combo.currentIndexChanged.connect(
            lambda *_: self.temperature_spin.setEnabled(bool(self.sampling_combo.currentData())))
        self.temperature_spin.setEnabled(False)
        self._form: QFormLayout | None = None
        self.code_note = QLabel(objectName="codeSpecNote")
        self.code_note.setWordWrap(True)
        self.code_note.setVisible(False)
        self.monitor_combo.textActivated.connect(self._on_monitor_chosen)
        self.kind_combo.currentIndexChanged.connect(self._on_kind_changed)
        self._on_kind_changed()

    def lay_out(self, form: QFormLayout) -> None:
        """Add the rows to ``form``."""
        form.addRow(self.code_note)
        form.addRow("Task", self.kind_combo)
        form.addRow("Training step", self.step_edit)
        form.addRow("Validation step", self.validation_step_edit)
        form.addRow("Task loss", self.loss_edit)
        form.addRow("Metrics", self.metrics_edit)
        form.addRow("Prompts", self.prompts_edit)
        form.addRow("Completions", self._completions)
        form.addRow("Best checkpoint by", self.monitor_combo)
        form.addRow("Mode", self.mode_combo)
        self._form = form
        self._on_kind_changed()

    def edits(self) -> list[QLineEdit]:
        """The text fields (for change notifications)."""
        return [self.step_edit, self.validation_step_edit, self.loss_edit, self.metrics_edit, self.prompts_edit]

    def combos(self) -> list[QComboBox]:
        """The choice fields (for change notifications)."""
        return [self.kind_combo, self.monitor_combo, self.mode_combo, self.sampling_combo]

    def read(self, base: TaskConfig) -> TaskConfig:
        """A :class:`TaskConfig` from the widgets (``files`` from ``base``)."""
        metrics = [m.strip() for m in self.metrics_edit.text().split(",") if m.strip()]
        prompts = [p.strip() for p in self.prompts_edit.text().split(PROMPT_SEPARATOR) if p.strip()]
        return dataclasses.replace(
            base, kind=self.kind_combo.currentData(), step=self.step_edit.text().strip(), prompts=prompts,
            validation_step=self.validation_step_edit.text().strip(), loss=self.loss_edit.text().strip(),
            metrics=metrics, monitor=self.monitor_combo.currentText().strip() or "val_loss",
            mode=self.mode_combo.currentData(), do_sample=bool(self.sampling_combo.currentData()),
            temperature=round(self.temperature_spin.value(), 2))

    def show(self, task: TaskConfig) -> None:
        """Put ``task`` in the widgets."""
        index = self.kind_combo.findData(task.kind)
        self.kind_combo.setCurrentIndex(max(index, 0))
        self.step_edit.setText(task.step)
        self.validation_step_edit.setText(task.validation_step)
        self.loss_edit.setText(task.loss)
        self.metrics_edit.setText(", ".join(str(m) for m in task.metrics))
        self.prompts_edit.setText(f" {PROMPT_SEPARATOR} ".join(str(p) for p in task.prompts))
        self.monitor_combo.setEditText(task.monitor or "val_loss")
        self.mode_combo.setCurrentIndex(max(self.mode_combo.findData(task.mode), 0))
        self.sampling_combo.setCurrentIndex(1 if task.do_sample else 0)
        self.temperature_spin.setValue(float(task.temperature))

    def set_code_note(self, origin: str | None, specs: list[str]) -> None:
        """Say that ``specs`` came from the file ``origin`` and need a confirmation at Start; None hides it."""
        self.code_note.setVisible(bool(origin and specs))
        if origin and specs:
            self.code_note.setText(f"From {origin}: names code ({', '.join(specs)}). Start asks before running it.")
            self.code_note.setToolTip(origin)

    def _on_monitor_chosen(self, text: str) -> None:
        """A monitor picked from the list sets its direction (accuracy, R², F1, mAP: max; losses and errors: min)."""
        self.mode_combo.setCurrentIndex(self.mode_combo.findData("max" if text in MAXIMIZED else "min"))

    def _on_kind_changed(self, *args) -> None:
        kind = self.kind_combo.currentData()
        defaults = DEFAULT_METRICS.get(kind)
        if kind == "auto":
            text = "the task's defaults"
        else:
            text = ", ".join(defaults) if defaults else "none (your step's values)"
        self.metrics_edit.setPlaceholderText(text)
        if self._form is not None:
            self._form.setRowVisible(self.prompts_edit, kind == "causal_lm")
            self._form.setRowVisible(self._completions, kind == "causal_lm")
