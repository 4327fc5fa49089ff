"""Opening, creating, saving and exporting models: the file side of ``MainWindow``.

A mixin so ``main_window.py`` stays about layout. Every dialog goes through an
overridable ``_ask_*`` / ``_show_error`` method that tests monkeypatch; nothing
here calls ``exec()`` outside those methods.
"""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox

from workbench.core.errors import ArchitectureError, TrustRequired, WorkbenchError
from workbench.core.files import atomic_write_text
from workbench.core.model import architectures, saving
from workbench.core.model import checkpoint as core_checkpoint
from workbench.core.model import tree as summary
from workbench.core.model.architectures import ArchSpec
from workbench.core.model.demo import DEMO_INPUT_SHAPE, DigitsCNN
from workbench.ui.model import dialogs

CHECKPOINT_FILTER = "Checkpoints (*.pt *.pth *.ckpt *.bin *.safetensors *.tar *.pkl);;All files (*)"
MAX_RECENT = 10
#: Input shape filled in for image classifiers built from torchvision names.
IMAGE_INPUT_SHAPE = (1, 3, 224, 224)


def default_input_shape(spec: ArchSpec | None) -> tuple[int, ...] | None:
    """The example input shape to annotate a model with: the demo's, or ``(1, 3, 224, 224)``
    for torchvision classification models; None when unknown."""
    if spec is None:
        return None
    if spec.name == "digits_cnn":
        return DEMO_INPUT_SHAPE
    try:
        import torchvision

        classifiers = set(torchvision.models.list_models(module=torchvision.models))
    except Exception:  # pragma: no cover - torchvision API drift
        return None
    return IMAGE_INPUT_SHAPE if spec.name in classifiers else None


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


class WindowIOMixin:
    """File > Open / Open Recent / New / Save / Export for ``MainWindow``."""

    # -- opening ---------------------------------------------------------------
    def open_demo(self) -> None:
        """Show the built-in demo model (``DigitsCNN``, input ``(1, 1, 8, 8)``)."""
        self.show_model(DigitsCNN(), ArchSpec("digits_cnn"), None, DEMO_INPUT_SHAPE, source="demo")

    def open_path(self, path, arch: ArchSpec | str | None = None, trust: bool = False) -> bool:
        """Open a checkpoint file and show its model.

        Parameters
        ----------
        path : str or Path
            Any checkpoint form ``core.checkpoint.read_checkpoint`` reads.
        arch : ArchSpec or str, optional
            The architecture (``"resnet18"``, ``"resnet18(num_classes=10)"``,
            ``"pkg.mod:fn"``); without one, the file's own ``arch`` entry is used
            or the Architecture dialog asks.
        trust : bool
            Load pickled code without asking (``--trust``).

        Returns
        -------
        bool
            True when a model is shown; False when cancelled or on an error
            (shown through ``_show_error``; the previous model stays).
        """
        if self._refuse_while_training("open another model"):
            return False
        path = Path(path)
        if not path.exists():
            self._forget_recent(path)
        try:
            ckpt = self._read_checkpoint(path, trust)
            loaded = None if ckpt is None else self._load_model(ckpt, arch)
        except (WorkbenchError, ValueError, OSError) as exc:
            self._show_error(str(exc))
            return False
        if loaded is None:
            return False
        model, spec = loaded
        fmt = ckpt.metadata.format
        self.show_model(model, spec, ckpt, default_input_shape(spec), source=f"{path.name} · {fmt}")
        self._add_recent(path)
        return True

    def _read_checkpoint(self, path: Path, trust: bool):
        try:
            return core_checkpoint.read_checkpoint(path, trust=trust)
        except TrustRequired as err:
            if not self._ask_trust(err):
                return None
            return core_checkpoint.read_checkpoint(path, trust=True)

    def _load_model(self, ckpt, arch):
        """(model, spec) for a read checkpoint, or None when the user cancelled."""
        if arch is None and ckpt.module is not None:
            model, _ = architectures.load_model(ckpt, None)
            spec = ArchSpec.from_dict(ckpt.metadata.arch) if ckpt.metadata.arch else None
            return model, spec
        spec = self._choose_spec(ckpt, arch)
        if spec is None:
            return None
        if spec == dialogs.WEIGHTS_ONLY:
            return architectures.weights_only_model(ckpt.state_dict), None
        try:
            model, _report = architectures.load_model(ckpt, spec, strict=True)
        except ArchitectureError as err:
            report = getattr(err, "report", None)
            if report is None or report.ok:
                raise
            if not self._ask_partial_load(report, ckpt, spec):
                return None
            model, _report = architectures.load_model(ckpt, spec, strict=False)
        return model, spec

    def _choose_spec(self, ckpt, arch):
        if isinstance(arch, ArchSpec):
            return arch
        if arch:
            return ArchSpec.parse(str(arch))
        if ckpt.metadata.arch:
            return ArchSpec.from_dict(ckpt.metadata.arch)
        return self._ask_architecture(architectures.detect_architecture(ckpt.state_dict))

    def new_from_architecture(self, spec: ArchSpec | None = None) -> bool:
        """Build a freshly initialized model (File > New from architecture); asks when ``spec`` is None."""
        if self._refuse_while_training("create another model"):
            return False
        spec = spec if spec is not None else self._ask_new_architecture()
        if spec is None:
            return False
        try:
            model = architectures.build_module(spec)
        except (WorkbenchError, TypeError, ValueError) as exc:
            self._show_error(f"New from architecture {spec}: {exc}")
            return False
        self.show_model(model, spec, None, default_input_shape(spec), source=f"new {spec}")
        return True

    # -- saving / export -----------------------------------------------------
    def save_checkpoint(self, path) -> bool:
        """Write the model as a Workbench checkpoint (``core.saving``), atomically.

        The payload holds ``model_state_dict``, ``arch``, ``frozen``,
        ``workbench_version`` and, after a run, the optimizer / scheduler state,
        epoch, step and loss from ``training_panel.checkpoint_extras()``.
        While a run is active the save is queued on the trainer
        (``training_panel.queue_save``) and happens at the next step boundary.

        Returns
        -------
        bool
            True when written (or queued); False on an error (shown).
        """
        panel = self.training_panel
        if panel is not None and panel.is_running():
            panel.queue_save(str(path))
            self.statusBar().showMessage(f"Saving {Path(path).name} at the next training step…", 5000)
            return True
        extras = panel.checkpoint_extras() if panel is not None else {}
        try:
            payload = saving.checkpoint_payload(self.model, arch=self.arch_spec, epoch=extras.get("epoch"),
                                                step=extras.get("step"), loss=extras.get("loss"))
            for key in ("optimizer_state_dict", "scheduler_state_dict"):
                if extras.get(key) is not None:
                    payload[key] = extras[key]
            saving.save_checkpoint(path, payload)
        except (WorkbenchError, ValueError, OSError) as exc:
            self._show_error(f"Could not save {path}: {exc}")
            return False
        self.statusBar().showMessage(f"Saved {path}", 5000)
        self._add_recent(Path(path))
        return True

    def export_summary(self, path) -> bool:
        """Write the module tree as Markdown (``.md``) or CSV (``.csv``) via ``core.summary``."""
        path = Path(path)
        root = self.tree_model.root
        text = summary.to_csv(root) if path.suffix.lower() == ".csv" else summary.to_markdown(root)
        try:
            atomic_write_text(path, text)
        except OSError as exc:
            self._show_error(f"Could not write {path}: {exc}")
            return False
        self.statusBar().showMessage(f"Exported the summary to {path}", 5000)
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
        self._rebuild_recent_menu()

    def _forget_recent(self, path: Path) -> None:
        """Drop ``path`` from File > Open Recent (it no longer exists)."""
        path_text = str(Path(path).resolve())
        files = self.recent_files()
        if path_text in files:
            self.settings.setValue("recentFiles", [f for f in files if f != path_text])
            self._rebuild_recent_menu()

    # -- menu handlers -------------------------------------------------------------
    def _on_open_triggered(self) -> None:
        path = self._ask_open_path()
        if path:
            self.open_path(path)

    def _on_save_triggered(self) -> None:
        default = self.checkpoint.path.with_name(self.checkpoint.path.stem + "_workbench.pt") if self.checkpoint else None
        path = self._ask_save_path("Save checkpoint", CHECKPOINT_FILTER, str(default or "model.pt"))
        if path:
            self.save_checkpoint(path)

    def _on_export_triggered(self) -> None:
        path = self._ask_save_path("Export summary", "Markdown (*.md);;CSV (*.csv)", "summary.md")
        if path:
            self.export_summary(path)

    # -- overridable dialogs (tests monkeypatch these) ---------------------------
    def _ask_open_path(self) -> str | None:
        path, _ = QFileDialog.getOpenFileName(self, "Open checkpoint", "", CHECKPOINT_FILTER)
        return path or None

    def _ask_save_path(self, title: str, filters: str, default: str) -> str | None:
        path, selected = QFileDialog.getSaveFileName(self, title, default, filters)
        return with_filter_suffix(path, selected) or None

    def _ask_architecture(self, candidates: list) -> ArchSpec | str | None:
        """Architecture dialog: an ``ArchSpec``, ``dialogs.WEIGHTS_ONLY`` or None (cancel)."""
        name = self.checkpoint.path.name if self.checkpoint else ""
        dialog = dialogs.ArchitectureDialog(candidates, architectures.list_architectures(), name, self)
        dialog.exec()
        choice = dialog.chosen()
        dialog.deleteLater()
        return choice

    def _ask_new_architecture(self) -> ArchSpec | None:
        dialog = dialogs.NewModelDialog(architectures.list_architectures(), self)
        dialog.exec()
        spec = dialog.chosen()
        dialog.deleteLater()
        return spec

    def _ask_trust(self, err: TrustRequired) -> bool:
        """The trust dialog (Cancel is the default); True = load the code."""
        box = dialogs.trust_dialog(err, self)
        box.exec()
        return dialogs.accepted_button(box)

    def _ask_partial_load(self, report, ckpt, spec) -> bool:
        """The load report dialog; True = partial load."""
        box = dialogs.load_report_dialog(report, Path(ckpt.path).name, str(spec), self)
        box.exec()
        return dialogs.accepted_button(box)

    def _ask_int(self, title: str, label: str, value: int) -> int | None:
        number, ok = QInputDialog.getInt(self, title, label, value, 1, 1_000_000)
        return number if ok else None

    def _ask_float(self, title: str, label: str, value: float) -> float | None:
        number, ok = QInputDialog.getDouble(self, title, label, value, -1e9, 1e9, 6)
        return number if ok else None

    def _show_error(self, message: str) -> None:
        QMessageBox.critical(self, "Workbench", message)


__all__ = ["WindowIOMixin", "default_input_shape", "with_filter_suffix"]
