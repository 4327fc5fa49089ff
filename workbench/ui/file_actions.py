"""FileActions: File > Open / Open Recent / New / Demo / Save / Export for the session.

Opening goes through the one answer policy
(:class:`workbench.core.model.open_policy.OpenPolicy`): each typed question
:func:`~workbench.core.model.opening.open_model` raises (trust, architecture,
partial fit) is put to the user through the prompts, and the open resumes from
what was read with the answer (the file is read once). A bare state_dict whose
detected best match is unique and matches every key and shape opens in it with
no question (the status bar names it; Edit > Change architecture… asks). The
example input comes with the opened model (``Opened.example`` / ``input_shape``). Every
file opened is checked for NaN / Inf weights
(:func:`workbench.core.model.health_check.find_nonfinite`): the tree badges the
modules and the status bar names the tensors. Saving goes through the one
payload writer (:mod:`workbench.core.model.saving`).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, QSettings, Signal
from PySide6.QtWidgets import QWidget

from workbench.core.errors import CheckpointCorrupt, WorkbenchError
from workbench.core.files import atomic_write_text
from workbench.core.model import meta_build, saving
from workbench.core.model import tree as core_tree
from workbench.core.model.detection import Candidate, detect_architecture
from workbench.core.model.spec import ArchSpec
from workbench.core.model.demo import DEMO_INPUT_SHAPE, DigitsCNN
from workbench.core.model.diff import module_diff
from workbench.core.model.example_input import spec_input_shape
from workbench.core.model.health_check import NonFiniteTensor, find_nonfinite, nonfinite_summary
from workbench.core.model.open_policy import OpenPolicy
from workbench.core.model.opening import Opened
from workbench.core.model.skeleton import is_skeleton
from workbench.core.train.trainer.commands import SaveNow
from workbench.core.probe.health import Badge
from workbench.core.train.trainer.faults import nonfinite_tensors
from workbench.ui.dialogs import WEIGHTS_ONLY
from workbench.ui.prompts import CHECKPOINT_FILTER
from workbench.ui.session import Session
from workbench.ui.threading import run_in_background

__all__ = ["FileActions", "MAX_RECENT"]

MAX_RECENT = 10
#: QSettings key of the folder File > Open starts in (the last folder a file was opened from).
LAST_FOLDER_KEY = "lastOpenFolder"


class FileActions(QObject):
    """Open, create, save and export the session's model; the recent-files list.

    Parameters
    ----------
    session : Session
    prompts : Prompts
    settings : QSettings
        Holds ``recentFiles``.

    Signals
    -------
    recentFilesChanged()
    """

    recentFilesChanged = Signal()

    def __init__(self, session: Session, prompts, settings: QSettings, parent: QObject | None = None):
        super().__init__(parent)
        self.session = session
        self.prompts = prompts
        self.settings = settings
        self._detected: Candidate | None = None  # the unique full match the last open took without asking

    def _dialog_parent(self):
        parent = self.parent()
        return parent if isinstance(parent, QWidget) else None

    # -- opening ---------------------------------------------------------------
    def open_demo(self) -> None:
        """Show the built-in demo model (``DigitsCNN``, input ``(1, 1, 8, 8)``)."""
        self.session.set_model(DigitsCNN(), ArchSpec("digits_cnn"), None, DEMO_INPUT_SHAPE, source="demo")

    def open_path(self, path, arch: ArchSpec | str | None = None, trust: bool = False,
                  choose: bool = False) -> bool:
        """Open a checkpoint file and show its model.

        Parameters
        ----------
        path : str or Path
            Any checkpoint form ``core.model.checkpoint.read_checkpoint`` reads.
        arch : ArchSpec or str, optional
            The architecture (``"resnet18"``, ``"resnet18(num_classes=10)"``,
            ``"pkg.mod:fn"``); without one, the file's own ``arch`` entry is used
            or the Architecture dialog asks.
        trust : bool
            Load pickled code without asking (``--trust``).
        choose : bool
            Ask for the architecture even when the file names one or one
            candidate matches every key and shape (Edit > Change architecture…).

        Returns
        -------
        bool
            True when a model is shown; False when cancelled or on an error
            (shown through the prompts; the previous model stays).
        """
        if self.session.refuse_while_running("open another model"):
            return False
        path = Path(path)
        if not path.exists():
            self._forget_recent(path)
        self._detected = None
        try:
            opened = self._open(path, arch, trust, choose)
        except CheckpointCorrupt as exc:  # offer the newest checkpoint of the folder that verifies
            if exc.intact is not None and Path(exc.intact) != path and self.prompts.open_intact(exc):
                return self.open_path(exc.intact, arch=arch, trust=trust)
            if exc.intact is None:
                self.prompts.error(str(exc))
            return False
        except (WorkbenchError, ValueError, OSError) as exc:
            self.prompts.error(str(exc))
            return False
        if opened is None:
            return False
        opened, bad = opened
        detected = self._detected
        source = opened.source + (f" · {opened.spec} (detected)" if detected is not None else "")
        self.session.set_model(opened.model, opened.spec, opened.checkpoint, opened.input_shape,
                               source=source, example=opened.example)
        self._show_health(bad, detected)
        self._add_recent(path)
        self.settings.setValue(LAST_FOLDER_KEY, str(path.resolve().parent))
        return True

    def _show_health(self, bad: list[NonFiniteTensor], detected: Candidate | None) -> None:
        """Badge the modules whose tensors hold NaN/Inf and say so, and name a detected architecture, in the status bar."""
        badges: dict[str, list[Badge]] = {}
        for found in bad:
            text = (f"{found.name}: {found.count:,} of {found.numel:,} values are NaN/Inf "
                    f"({found.fraction:.1%}), as opened")
            badges.setdefault(found.module, []).append(Badge("nonfinite", found.fraction, -1, text))
        self.session.set_weight_badges(badges)  # also clears the badges of the model shown before
        lines = [nonfinite_summary(bad)] if bad else []
        if detected is not None:
            lines.append(f"Opened as {detected.spec}: the only architecture that matches every key and shape "
                         "(Edit > Change architecture… to choose another)")
        if lines:
            self.session.show_status(" · ".join(lines), 30000)

    def change_architecture(self) -> bool:
        """Edit > Change architecture…: open the file shown again, choosing its architecture in the dialog.

        Returns
        -------
        bool
            True when the file opened with the choice; False when cancelled, on an
            error, or when the model shown is not from a state_dict file.
        """
        ckpt = self.session.checkpoint
        if self.session.refuse_while_running("change the architecture"):
            return False
        if ckpt is None or ckpt.module is not None:
            self.session.show_status("Change architecture needs a checkpoint of weights (a state_dict) "
                                     "opened from a file.", 8000)
            return False
        return self.open_path(ckpt.path, choose=True)

    def _open(self, path: Path, arch, trust: bool,
              choose: bool = False) -> tuple[Opened, list[NonFiniteTensor]] | None:
        """The open policy, answering its questions through the prompts, and the model's non-finite tensors.

        None when cancelled. ``choose`` asks for the architecture first, whatever the file says.
        """
        weights_only = False
        if choose:
            arch = self._ask_architecture(path)
            if arch is None:
                return None
            weights_only, arch = arch == WEIGHTS_ONLY, (None if arch == WEIGHTS_ONLY else arch)
        parent = self._dialog_parent()
        # reading a large file and ranking architectures take seconds: keep the window painting
        policy = OpenPolicy(self.prompts, take_unique_match=not choose,
                            run=lambda step: run_in_background(step, f"Opening {path.name}…", parent))
        opened = policy.open(path, arch, trust=trust, weights_only=weights_only)
        if opened is None:
            return None
        self._detected = policy.detected
        return opened, run_in_background(lambda: find_nonfinite(opened.model), f"Checking {path.name}…", parent)

    def _ask_architecture(self, path: Path):
        """The Architecture dialog on the session's checkpoint: an ArchSpec, ``WEIGHTS_ONLY`` or None."""
        state_dict = self.session.checkpoint.state_dict
        candidates = run_in_background(lambda: detect_architecture(state_dict), "Ranking architectures…",
                                       self._dialog_parent())
        return self.prompts.architecture(candidates, path.name)

    def compare_with(self, path) -> list:
        """Compare the shown model with another checkpoint of its architecture, module by module.

        The file is opened by the one open policy (with the shown model's
        architecture); :func:`workbench.core.model.diff.module_diff` gives the
        relative change of each module's parameters and buffers, which the tree
        shows as a column and a colour. Returns the changes, largest first ([] on
        an error or a cancel, which the prompts report).
        """
        model = self.session.model
        if model is None:
            self.prompts.error("Open a model first, then compare it with another checkpoint.")
            return []
        path = Path(path)
        try:
            other = self._open(path, self.session.arch_spec, False)
        except (WorkbenchError, ValueError, OSError) as exc:
            self.prompts.error(str(exc))
            return []
        if other is None:
            return []
        other = other[0]
        try:
            changes = module_diff(model, other.model, names=("the shown model", str(path)))
        except WorkbenchError as exc:  # e.g. a broadcast tensor that would take hours to reduce
            self.prompts.error(str(exc))
            return []
        missing = [c for c in changes if c.note]
        if missing and len(missing) == len(changes) and not any(c.params > 0 for c in changes):
            self.prompts.error(f"{path.name} does not fit this model: {missing[0].note}")
            return []
        self.session.set_comparison({c.module: c for c in changes}, str(path))
        top = ", ".join(f"{c.module or '(root)'} {max(c.params, c.buffers, 0.0):.2g}" for c in changes[:3]
                        if not c.note)
        self.session.show_status(f"Compared with {path.name}: {len(changes)} module(s) changed"
                                 + (f"; largest: {top}" if top else ""), 20000)
        return changes

    def on_compare_triggered(self) -> None:
        """File > Compare with checkpoint…"""
        path = self.prompts.open_path(str(self.settings.value(LAST_FOLDER_KEY, "") or ""))
        if path:
            self.compare_with(path)

    def new_from_architecture(self, spec: ArchSpec | None = None) -> bool:
        """Build a freshly initialized model (File > New from architecture); asks when ``spec`` is None."""
        if self.session.refuse_while_running("create another model"):
            return False
        spec = spec if spec is not None else self.prompts.new_architecture()
        if spec is None:
            return False
        try:
            model = meta_build.build_module(spec)
        except (WorkbenchError, TypeError, ValueError) as exc:
            self.prompts.error(f"New from architecture {spec}: {exc}")
            return False
        self.session.set_model(model, spec, None, spec_input_shape(spec), source=f"new {spec}")
        return True

    def new_table_model(self) -> bool:
        """File > New Tabular MLP for the table: ``tabular_mlp`` sized for the Training settings' CSV table.

        Its ``in_features`` and ``num_outputs`` come from the table (read on a worker
        thread: :func:`workbench.core.train.launch.headless.fill_table_model_kwargs`),
        so the run's run.toml names the same model.
        """
        from workbench.core.train.config import ModelConfig, TrainConfig
        from workbench.core.train.launch.headless import fill_table_model_kwargs
        from workbench.ui.threading import run_in_background

        try:
            data_cfg = self.session.data_config()
        except ValueError as exc:
            self.prompts.error(f"New Tabular MLP: the training settings: {exc}")
            return False
        if data_cfg is None or data_cfg.dataset != "csv":
            self.prompts.error("New Tabular MLP: choose a CSV table as the dataset in Training first "
                               "(Dataset: CSV table, its file and its target column).")
            return False
        cfg = TrainConfig(data=data_cfg, model=ModelConfig(arch="tabular_mlp"))
        try:
            run_in_background(lambda: fill_table_model_kwargs(cfg), f"Reading {Path(data_cfg.root).name}…",
                              self._dialog_parent())
        except (WorkbenchError, ValueError, OSError) as exc:
            self.prompts.error(f"New Tabular MLP: {exc}")
            return False
        return self.new_from_architecture(ArchSpec("tabular_mlp", dict(cfg.model.kwargs)))

    # -- saving / export -----------------------------------------------------
    def save_checkpoint(self, path) -> bool:
        """Write the model as a Workbench checkpoint (``core.model.saving``), atomically.

        The payload holds ``model_state_dict``, ``arch``, ``frozen``,
        ``workbench_version`` and, after a run, the optimizer / scheduler state,
        epoch, step and loss (``session.run_extras``). While a run is active the
        save is sent to the run (:class:`~workbench.core.train.trainer.commands.SaveNow`)
        and happens at the next step boundary.

        Returns
        -------
        bool
            True when written (or queued); False on an error (shown).
        """
        session = self.session
        if is_skeleton(session.model):  # an attached script's structure: its weights live in the script
            if session.running:
                session.send_command(SaveNow(None))
                session.show_status("The script saves last.pt into its own run folder at its next step…", 8000)
                return True
            self.prompts.error("This tree is the structure of a script's model: its weights are in the script. "
                               "Attach to the script again and use Save now (it writes last.pt into the "
                               "script's run folder).")
            return False
        if session.running:
            session.send_command(SaveNow(str(path)))
            session.show_status(f"Saving {Path(path).name} at the next training step…", 5000)
            return True
        extras = session.run_extras
        from workbench.core.model import lora as core_lora

        mode = "keep"
        if core_lora.lora_paths(session.model):  # adapters: merge them, keep them, or save them alone
            mode = self.prompts.lora_save()
            if mode is None:
                return False
            if mode == "adapters":
                folder = Path(path).with_suffix("")
                try:
                    core_lora.save_adapters(session.model, folder)
                except (WorkbenchError, ValueError, OSError) as exc:
                    self.prompts.error(f"Could not save the adapters to {folder}: {exc}")
                    return False
                session.show_status(f"Saved the adapters to {folder} (adapter_model.safetensors, "
                                    "adapter_config.json)", 5000)
                return True
        try:
            payload = saving.checkpoint_payload(session.model, arch=session.arch_spec, epoch=extras.get("epoch"),
                                                step=extras.get("step"), loss=extras.get("loss"),
                                                # the adapters' edits (a replaced head is in the arch spec already)
                                                edits=[e for e in session.edits if e.get("op") == "add_lora"],
                                                lora=mode)
            for key in ("optimizer_state_dict", "scheduler_state_dict"):
                if extras.get(key) is not None:
                    payload[key] = extras[key]
            path, notes = saving.save_model_file(path, payload)  # the format the suffix names
        except (WorkbenchError, ValueError, OSError) as exc:
            self.prompts.error(f"Could not save {path}: {exc}")
            return False
        bad = nonfinite_tensors(session.model)
        if bad:  # written as asked, never silently
            self.prompts.error(f"Saved {path}, but it holds NaN/Inf values in {', '.join(bad[:5])}"
                               f"{' and more' if len(bad) > 5 else ''}: the model diverged")
        session.show_status(f"Saved {path}" + "".join(f"; {n}" for n in notes), 10000 if notes else 5000)
        self._add_recent(Path(path))
        return True

    def export_summary(self, path) -> bool:
        """Write the module tree as Markdown (``.md``) or CSV (``.csv``) via ``core.model.tree``."""
        path = Path(path)
        root = self.session.tree_root
        text = core_tree.to_csv(root) if path.suffix.lower() == ".csv" else core_tree.to_markdown(root)
        try:
            atomic_write_text(path, text)
        except OSError as exc:
            self.prompts.error(f"Could not write {path}: {exc}")
            return False
        self.session.show_status(f"Exported the summary to {path}", 5000)
        return True

    # -- recent files ------------------------------------------------------------
    def recent_files(self) -> list[str]:
        """Recently opened / saved files, newest first (persisted in QSettings)."""
        value = self.settings.value("recentFiles", [])
        if isinstance(value, str):
            value = [value]
        return [str(v) for v in (value or [])]

    def _add_recent(self, path: Path) -> None:
        path_text = str(Path(path).resolve())
        files = [path_text] + [f for f in self.recent_files() if f != path_text]
        self.settings.setValue("recentFiles", files[:MAX_RECENT])
        self.recentFilesChanged.emit()

    def _forget_recent(self, path: Path) -> None:
        """Drop ``path`` from File > Open Recent (it no longer exists)."""
        path_text = str(Path(path).resolve())
        files = self.recent_files()
        if path_text in files:
            self.settings.setValue("recentFiles", [f for f in files if f != path_text])
            self.recentFilesChanged.emit()

    # -- menu handlers -------------------------------------------------------------
    def on_open_triggered(self) -> None:
        """File > Open…, starting in the folder of the last file opened."""
        path = self.prompts.open_path(str(self.settings.value(LAST_FOLDER_KEY, "") or ""))
        if path:
            self.open_path(path)

    def on_open_folder_triggered(self) -> None:
        """File > Open model folder… (a Hugging Face ``save_pretrained`` folder, a timm hub folder)."""
        path = self.prompts.open_folder(str(self.settings.value(LAST_FOLDER_KEY, "") or ""))
        if path:
            self.open_path(path)

    def on_save_triggered(self) -> None:
        """File > Save checkpoint…"""
        ckpt = self.session.checkpoint
        default = ckpt.path.with_name(ckpt.path.stem + "_workbench.pt") if ckpt else None
        path = self.prompts.save_path("Save checkpoint", CHECKPOINT_FILTER, str(default or "model.pt"))
        if path:
            self.save_checkpoint(path)

    def save_model_folder(self, folder) -> bool:
        """Write the model as a ``save_pretrained`` folder that transformers / timm load back (File > Save as model
        folder…): config with the head's labels, safetensors weights, LoRA adapters merged, and the tokenizer of
        the folder the model was opened from (:func:`workbench.core.train.task.hf_export.save_model_folder`).

        Returns
        -------
        bool
            True when written; False on an error (shown) or during a run (the weights are moving).
        """
        from workbench.core.model import lora as core_lora
        from workbench.core.train.data.text_files import TOKENIZER_FILES
        from workbench.core.train.task.hf_export import save_model_folder

        session = self.session
        if session.running:
            self.prompts.error("Save as model folder: the model is training; stop the run (or wait for its end) "
                               "and save again.")
            return False
        model = session.model
        merged = bool(core_lora.lora_paths(model))
        if merged:
            model = core_lora.merged_copy(model)  # people load plain weights; the window keeps its adapters
        opened = getattr(session.checkpoint, "path", None)
        tokenizer = Path(opened) if opened and Path(opened).is_dir() and \
            any((Path(opened) / n).is_file() for n in TOKENIZER_FILES) else None
        try:
            save_model_folder(model, folder, tokenizer)
        except (WorkbenchError, ValueError, OSError) as exc:
            self.prompts.error(f"Save as model folder {folder}: {exc}")
            return False
        said = [f"Saved the model folder {folder}"]
        if merged:
            said.append("LoRA adapters merged")
        said.append(f"tokenizer from {tokenizer.name}" if tokenizer else "no tokenizer (the model was not opened "
                    "from a folder with one)")
        session.show_status("; ".join(said), 10000)
        return True

    def on_save_folder_triggered(self) -> None:
        """File > Save as model folder…"""
        path = self.prompts.open_folder(str(self.settings.value(LAST_FOLDER_KEY, "") or ""))
        if path:
            self.save_model_folder(path)

    def export_model(self, path) -> bool:
        """Export the model shown (File > Export model…) and prove the artifact on a batch
        (:func:`workbench.core.export.api.export` on a worker thread): the format follows the suffix
        (``.onnx``, ``.pt2``, ``.safetensors``); the verdict goes to the status bar, a failed check or
        export to the error box with the report, and the first module that differs is selected in the tree.

        Returns
        -------
        bool
            True when written and every check passed.
        """
        from workbench.core.export.api import export, format_for_path

        session = self.session
        try:
            fmt = format_for_path(path)
        except WorkbenchError as exc:
            self.prompts.error(f"Export model: {exc} (File > Save as model folder… writes a Hugging Face folder).")
            return False
        if session.running:
            self.prompts.error("Export model: the model is training; stop the run (or wait for its end) and "
                               "export again.")
            return False
        example = session.example if session.example is not None else None
        shape = None if example is not None else session.input_shape
        try:
            report = run_in_background(lambda: export(session.model, fmt, path, example=example, input_shape=shape,
                                                      arch=session.arch_spec),
                                       f"Exporting to {Path(path).name} and checking it…", self._dialog_parent())
        except (WorkbenchError, ValueError, OSError, RuntimeError) as exc:
            self.prompts.error(f"Export model {Path(path).name}: {exc}")
            return False
        if report.first_difference is not None:
            session.reveal(report.first_difference.module)  # the tree selects the first module that differs
        if not report.passed:
            self.prompts.error("Export model: the exported model does not answer as this one does.\n\n"
                               + "\n".join(report.lines()))
            return False
        session.show_status(report.summary, 10000)
        return True

    def on_export_model_triggered(self) -> None:
        """File > Export model…"""
        name = Path(getattr(self.session.checkpoint, "path", None) or "model").stem
        path = self.prompts.save_path("Export model", "ONNX (*.onnx);;torch.export program (*.pt2);;"
                                      "Weights: safetensors (*.safetensors)", f"{name}.onnx")
        if path:
            self.export_model(path)

    def on_export_triggered(self) -> None:
        """File > Export summary…"""
        path = self.prompts.save_path("Export summary", "Markdown (*.md);;CSV (*.csv)", "summary.md")
        if path:
            self.export_summary(path)
