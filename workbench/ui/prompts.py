"""Every modal question the window asks, in one place.

:class:`Prompts` is what the window, its file actions, its edits and the
Training panel call when they need the user: a file name, an architecture, a
trust decision, a number, a NaN decision, a confirmation, or to show an error.
Nothing else in ``workbench.ui`` calls ``exec()``. Tests pass an object with
the same methods that answers at once and records what was asked, so no test
ever blocks on a dialog.
"""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox, QWidget

from workbench.core.errors import TrustRequired
from workbench.core.model import meta_build
from workbench.core.model.detection import Candidate
from workbench.core.model.loading import LoadReport
from workbench.core.model.spec import ArchSpec
from workbench.ui import dialogs, nonfinite_dialog

__all__ = ["Prompts", "CHECKPOINT_FILTER", "with_filter_suffix"]

CHECKPOINT_FILTER = ("Checkpoints (*.pt *.pth *.ckpt *.bin *.safetensors *.tar *.pkl config.json);;"
                     "All files (*)")


def with_filter_suffix(path: str, selected_filter: str) -> str:
    """Append the first extension of a file-dialog filter to ``path`` when it has none.

    Qt's own (non-native) save dialog does not add the extension of the chosen
    filter, and Export summary picks Markdown or CSV from the extension.

    Parameters
    ----------
    path : str
        What the user typed, e.g. ``"summary"``.
    selected_filter : str
        The chosen filter, e.g. ``"CSV (*.csv)"``.

    Returns
    -------
    str
        ``"summary.csv"``; ``path`` unchanged when it has an extension or the
        filter names none (``"All files (*)"``).
    """
    if not path or Path(path).suffix:
        return path
    match = re.search(r"\*\.(\w+)", selected_filter or "")
    return f"{path}.{match.group(1)}" if match else path


class Prompts:
    """The modal dialogs, each behind one method.

    Parameters
    ----------
    parent : QWidget or None
        Owner of the dialogs (the main window).
    """

    def __init__(self, parent: QWidget | None = None):
        self.parent = parent
        self._stop_box: QMessageBox | None = None  # end_training_process's box while it is open

    # ------------------------------------------------------------------ files
    def open_path(self, start_dir: str = "") -> str | None:
        """File > Open, starting in ``start_dir`` (the last folder used): a checkpoint path, or None."""
        path, _ = QFileDialog.getOpenFileName(self.parent, "Open checkpoint", start_dir, CHECKPOINT_FILTER)
        return path or None

    def open_folder(self, start_dir: str = "") -> str | None:
        """File > Open model folder: a Hugging Face or timm folder (``config.json`` + weights), or None."""
        path = QFileDialog.getExistingDirectory(self.parent, "Open model folder", start_dir)
        return path or None

    def save_path(self, title: str, filters: str, default: str) -> str | None:
        """A file to write (the chosen filter's extension added when none was typed), or None."""
        path, selected = QFileDialog.getSaveFileName(self.parent, title, default, filters)
        return with_filter_suffix(path, selected) or None

    # ------------------------------------------------------------------ opening a model
    def architecture(self, candidates: list[Candidate], file_name: str) -> ArchSpec | str | None:
        """The Architecture dialog for ``file_name``: an ``ArchSpec``, ``dialogs.WEIGHTS_ONLY`` or None."""
        dialog = dialogs.ArchitectureDialog(candidates, meta_build.list_architectures(), file_name, self.parent)
        dialog.exec()
        choice = dialog.chosen()
        dialog.deleteLater()
        return choice

    def new_architecture(self) -> ArchSpec | None:
        """File > New from architecture: the spec chosen, or None."""
        dialog = dialogs.NewModelDialog(meta_build.list_architectures(), self.parent)
        dialog.exec()
        spec = dialog.chosen()
        dialog.deleteLater()
        return spec

    def trust(self, err: TrustRequired) -> bool:
        """The trust dialog (Cancel is the default); True = load the code."""
        box = dialogs.trust_dialog(err, self.parent)
        box.exec()
        return dialogs.accepted_button(box)

    def open_intact(self, err) -> bool:
        """The corrupt-checkpoint dialog (Cancel is the default); True = open ``err.intact`` instead.

        Parameters
        ----------
        err : core.errors.CheckpointCorrupt
        """
        box = dialogs.corrupt_checkpoint_dialog(err, self.parent)
        box.exec()
        return dialogs.accepted_button(box)

    def partial_load(self, report: LoadReport, file_name: str, spec: ArchSpec) -> bool:
        """The load report dialog; True = load the tensors that fit."""
        from workbench.core.model.spec import short_name

        box = dialogs.load_report_dialog(report, file_name, short_name(spec) or str(spec), self.parent,
                                         spec_text=str(spec))
        box.exec()
        return dialogs.accepted_button(box)

    # ------------------------------------------------------------------ numbers
    def integer(self, title: str, label: str, value: int) -> int | None:
        """An integer in [1, 1,000,000], or None."""
        number, ok = QInputDialog.getInt(self.parent, title, label, value, 1, 1_000_000)
        return number if ok else None

    def number(self, title: str, label: str, value: float) -> float | None:
        """A float in [-1e9, 1e9] (6 decimals), or None."""
        number, ok = QInputDialog.getDouble(self.parent, title, label, value, -1e9, 1e9, 6)
        return number if ok else None

    # ------------------------------------------------------------------ messages
    def error(self, message: str) -> None:
        """A plain error message."""
        QMessageBox.critical(self.parent, "Workbench", message)

    def training_error(self, text: str) -> None:
        """A training error: a traceback goes into the details, its last line into the text."""
        box = QMessageBox(QMessageBox.Icon.Critical, "Training", "", QMessageBox.StandardButton.Ok, self.parent)
        box.setObjectName("trainingErrorBox")
        if "Traceback" in text:
            last = [line for line in text.strip().splitlines() if line.strip()][-1]
            box.setText(f"The training run stopped with an error:\n\n{last}\n\n"
                        "The model keeps the weights of the last completed step.")
            box.setDetailedText(text)
        else:
            box.setText(text)
        box.exec()

    def lora_save(self) -> str | None:
        """Saving a model with LoRA adapters: ``"merge"``, ``"keep"``, ``"adapters"`` (peft's folder) or None."""
        box = QMessageBox(QMessageBox.Icon.Question, "Save checkpoint",
                          "The model has LoRA adapters. Merge them into the weights (W + (alpha/r) BA), keep them "
                          "as adapters in the checkpoint, or save the adapters only (peft's format)?",
                          QMessageBox.StandardButton.Cancel, self.parent)
        box.setObjectName("loraSaveBox")
        buttons = {}
        for key, text, name in (("merge", "Merge adapters", "mergeAdaptersButton"),
                                ("keep", "Keep adapters", "keepAdaptersButton"),
                                ("adapters", "Save adapters only (peft)", "adaptersOnlyButton")):
            button = box.addButton(text, QMessageBox.ButtonRole.AcceptRole)
            button.setObjectName(name)
            buttons[button] = key
        box.setDefaultButton(next(iter(buttons)))
        box.exec()
        return buttons.get(box.clickedButton())

    def lora(self, target: str, types, present):
        """The LoRA options for ``target`` (:func:`workbench.ui.dialogs.ask_lora`), or None."""
        from workbench.ui import dialogs

        return dialogs.ask_lora(target, types, present, self.parent)

    # ------------------------------------------------------------------ training
    def attach_target(self) -> tuple[str, str] | None:
        """File > Attach to a running script…: ``(address, token)`` (:class:`~workbench.ui.attach_dialog.AttachDialog`), or None."""
        from workbench.ui.attach_dialog import ask_attach_target

        return ask_attach_target(self.parent)

    def confirm_stop(self) -> bool:
        """Closing during a run: stop it (after the current step), save last.pt and close?"""
        answer = QMessageBox.question(
            self.parent, "Training is running",
            "A training run is active. Stop it (after the current step), save last.pt and close?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel,
        )
        return answer == QMessageBox.StandardButton.Yes

    def end_training_process(self, seconds: int) -> bool:
        """Stop was asked ``seconds`` ago and the step has not returned: True = end the training process.

        :meth:`cancel_end_training_process` closes the box (answer No) when the run ends meanwhile.
        """
        box = QMessageBox(QMessageBox.Icon.Question, "Training does not stop",
                          f"The current training step has not returned in {seconds} s (a forward that hangs?).\n\n"
                          "End the training process? The window keeps the weights of the last pause or save, and "
                          "the run folder keeps its last checkpoint.",
                          QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, self.parent)
        box.setDefaultButton(QMessageBox.StandardButton.No)
        self._stop_box = box
        try:
            return box.exec() == QMessageBox.StandardButton.Yes
        finally:
            self._stop_box = None

    def cancel_end_training_process(self) -> None:
        """Close the box of :meth:`end_training_process` if it is open (the run ended): its answer is No."""
        if self._stop_box is not None:
            self._stop_box.reject()

    def replace_head(self, data_classes: int, outputs: int, message: str) -> bool:
        """The data has more classes than the model has outputs: True = replace the head with ``data_classes``."""
        box = QMessageBox(QMessageBox.Icon.Warning, "Training", f"Nothing was trained: {message}.",
                          QMessageBox.StandardButton.Cancel, self.parent)
        box.setObjectName("classCountBox")
        accept = box.addButton(f"Replace the head with {data_classes} outputs", QMessageBox.ButtonRole.AcceptRole)
        box.setDefaultButton(accept)
        box.exec()
        return box.clickedButton() is accept

    def start_from(self, run_name: str, path: str) -> str | None:
        """Start with a model trained in this window: ``"trained"`` (the weights run ``run_name`` left),
        ``"file"`` (the weights of ``path``, as opened; edits, frozen set and probes kept) or None (Cancel)."""
        from pathlib import Path

        box = QMessageBox(QMessageBox.Icon.Question, "Start training",
                          f"The model holds the weights trained by run {run_name}. Start from:",
                          QMessageBox.StandardButton.Cancel, self.parent)
        box.setObjectName("startFromBox")
        box.setDetailedText(f"Trained weights: run {run_name}\nFile as opened: {path}")
        trained = box.addButton(f"The trained weights (run {run_name})", QMessageBox.ButtonRole.AcceptRole)
        trained.setObjectName("startFromTrainedButton")
        opened = box.addButton(f"The file as opened ({Path(path).name})", QMessageBox.ButtonRole.AcceptRole)
        opened.setObjectName("startFromFileButton")
        opened.setToolTip(str(path))
        box.setDefaultButton(trained)
        box.exec()
        return {trained: "trained", opened: "file"}.get(box.clickedButton())

    def nonfinite(self, step: int, loss: float, can_rollback: bool = True, trace: str = "") -> str:
        """The NaN/Inf dialog (``trace``: the line naming the module that made it): ``"lower_lr"``,
        ``"rollback"`` or ``"stop"``."""
        return nonfinite_dialog.ask_nonfinite(self.parent, step, loss, can_rollback=can_rollback, trace=trace)
