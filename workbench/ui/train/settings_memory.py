"""What the Training form shows when nothing is running: the last run's settings, or the opened file's.

:class:`SettingsMemory` keeps the settings of the last run started for the next
session (QSettings ``training/config``, as TOML text), puts them back when the
window opens, resets them, and fills the form from an opened checkpoint's own
record (the run.toml beside it, its config, its optimizer) through
:func:`~workbench.core.train.config.settings_from_checkpoint`, or, when the file
records none, with the task the opened model was built for
(:func:`~workbench.core.train.task.from_model.propose_task`: a text model folder
gets a text task and its data fields, never the demo digits).
"""

from __future__ import annotations

from pathlib import Path

from workbench.core.train.config import ModelConfig, TrainConfig, settings_from_checkpoint

__all__ = ["SettingsMemory", "SETTINGS_KEY", "TEXT_LR"]

#: QSettings key of the settings of the last run started (TOML text), restored at start.
SETTINGS_KEY = "training/config"
#: The learning rate a text task starts from: transformers' ``TrainingArguments`` default (AdamW, 5e-5),
#: the usual fine-tuning rate of a pretrained transformer (Adam at 1e-3 wrecks its weights).
TEXT_LR = 5e-5


class SettingsMemory:
    """The form's remembered settings (see the module docstring).

    Parameters
    ----------
    form : TrainingSettings
        The Training form (``config()``, ``set_config()``, ``device_combo``, ``run_dir_edit``).
    qsettings : QSettings
        Where the settings are kept (:func:`workbench.ui.qsettings.make_settings`).
    """

    def __init__(self, form, qsettings):
        self.form = form
        self.qsettings = qsettings

    def remember(self, config: TrainConfig) -> None:
        """Keep the settings of the run just started for the next session (without its folder and model)."""
        kept = TrainConfig.from_dict(config.to_dict())
        kept.run_dir, kept.model = None, ModelConfig()
        self.qsettings.setValue(SETTINGS_KEY, kept.to_toml())

    def restore(self) -> None:
        """Show the remembered settings; settings written by another version are forgotten."""
        text = self.qsettings.value(SETTINGS_KEY, "")
        if not text:
            return
        try:
            self.show(TrainConfig.from_toml(str(text)))
        except (ValueError, TypeError):
            self.qsettings.remove(SETTINGS_KEY)  # written by another version: start from the defaults

    def show(self, cfg: TrainConfig, origin: str | None = None) -> None:
        """Put ``cfg`` in the form, keeping the device chosen here (the file's may not exist) and the run folder.

        ``origin``: the file ``cfg`` was read from; the code it names waits for a confirmation at Start
        (``TrainingSettings.code_to_confirm``).
        """
        cfg.device = self.form.device_combo.currentData() or cfg.device
        cfg.run_dir = self.form.run_dir_edit.text().strip() or None
        self.form.set_config(cfg, origin=origin)

    def reset(self) -> None:
        """Every training setting back to its default; the remembered settings are forgotten."""
        self.qsettings.remove(SETTINGS_KEY)
        self.show(TrainConfig())

    def fill_from_checkpoint(self, ckpt) -> str | None:
        """Show the settings ``ckpt`` (a :class:`~workbench.core.model.checkpoint.Checkpoint`) records.

        Returns
        -------
        str or None
            The status line saying where they came from, or None when the file records none.
        """
        meta = ckpt.metadata
        cfg = settings_from_checkpoint(ckpt.path, ckpt.raw, meta.optimizer_class, meta.optimizer_hparams)
        if cfg is None:
            return None
        beside = Path(ckpt.path).with_name("run.toml") if ckpt.path else None
        self.show(cfg, origin=str(beside if beside is not None and beside.is_file() else ckpt.path))
        done = f", {meta.epoch} epochs done" if meta.epoch else ""
        return f"Training settings from {Path(ckpt.path).name}: {cfg.optimizer}, lr {cfg.lr:.3g}{done}"

    def follow_task(self, model, ckpt) -> str | None:
        """Show the task ``model`` was built for, when it is a Hugging Face task (text, or image classification with
        the folder's image processor; the file recorded no settings).

        Parameters
        ----------
        model : nn.Module
            The opened model.
        ckpt : Checkpoint or None
            What it was opened from (a model folder's config names the architecture).

        Returns
        -------
        str or None
            The status line (the task, and the head training adds to a bare encoder), or None when the
            model proposes no text task (the form is left as it is).
        """
        from types import SimpleNamespace

        from workbench.core.train.config import HF_KINDS
        from workbench.core.train.task.from_model import propose_task

        proposal = propose_task(model, SimpleNamespace(checkpoint=ckpt))
        form = self.form
        dataset = "imagefolder" if proposal.kind == "image_classification" else "text"
        folder = Path(ckpt.path) if ckpt is not None and ckpt.path else None
        if folder is None or not folder.is_dir():
            folder = None
        if proposal.kind not in HF_KINDS or (form.task_fields.kind_combo.currentData() == proposal.kind
                                             and form.dataset_combo.currentData() == dataset):
            return None  # not a Hugging Face task, or the form already trains it (the user's settings stay)
        if dataset == "imagefolder" and (folder is None or not (folder / "preprocessor_config.json").is_file()):
            return None  # no image processor: the image settings the form has stay (transforms, sizes)
        form.dataset_combo.setCurrentIndex(form.dataset_combo.findData(dataset))
        kinds = form.task_fields.kind_combo
        kinds.setCurrentIndex(kinds.findData(proposal.kind))
        form.optimizer_combo.setCurrentIndex(form.optimizer_combo.findData("adamw"))
        form.lr_spin.setValue(TEXT_LR)
        if folder is not None:
            edit = form.source_fields.processor_edit if dataset == "imagefolder" else form.source_fields.tokenizer_edit
            edit.setText(str(folder))
        data = {"causal_lm": "a text file under Root (a .txt file or a text column)",
                "image_classification": "an ImageFolder under Root (one subfolder per class); the folder's image "
                                        "processor resizes and normalizes"}.get(
            proposal.kind, "a text file under Root with a text and a label column")
        note = f"; {proposal.note}" if proposal.note else ""
        return f"{proposal.title} ({type(model).__name__}): choose {data}{note}"
