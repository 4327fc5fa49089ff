"""Model edits of ``MainWindow``: freezing, re-initialization, head replacement, probes.

Every edit is a ``QUndoCommand`` (``ui/undo.py``). While a training run is active
the training thread owns the model: freezes are queued on the trainer
(``training_panel.queue_trainable``), structural edits are refused with a message.
"""

from __future__ import annotations

from dataclasses import replace

from workbench.core.errors import WorkbenchError
from workbench.core.model import freezing
from workbench.ui import undo


class WindowEditsMixin:
    """The tree's context menu and checkboxes land here."""

    keep_bn_stats_fixed: bool = False

    def is_training(self) -> bool:
        """True while the Training panel's run is active."""
        panel = self.training_panel
        return panel is not None and panel.is_running()

    def _refuse_while_training(self, what: str) -> bool:
        if not self.is_training():
            return False
        self.statusBar().showMessage(f"Stop the training run to {what}.", 8000)
        return True

    def _push(self, command: undo.ModelCommand) -> bool:
        """Apply ``command`` (errors shown, nothing pushed) and push it on the undo stack."""
        try:
            command.apply()
        except (WorkbenchError, ValueError) as exc:
            self._show_error(str(exc))
            self.refresh_tree()
            return False
        self.undo_stack.push(command.applied())
        return True

    # -- freezing -----------------------------------------------------------------
    def set_trainable(self, path_or_names, flag: bool) -> None:
        """Freeze (``flag=False``) or unfreeze modules / parameters by qualified name.

        What the Train checkbox calls. While a run is active the change is queued
        on the trainer and shows once applied at the next step boundary;
        otherwise it is applied through ``core.freezing`` and pushed on the undo stack.

        Parameters
        ----------
        path_or_names : str or list of str
            A module or parameter qualified name (``""`` = the whole model), or several.
        flag : bool
            The new ``requires_grad``.
        """
        names = [path_or_names] if isinstance(path_or_names, str) else list(path_or_names)
        if self.is_training():
            self.training_panel.queue_trainable(names, bool(flag))
            self.statusBar().showMessage("Queued: applied at the next training step.", 4000)
            return
        if len(names) == 1:
            self._push(undo.SetTrainableCommand(self, names[0], bool(flag)))
            return
        text = f"{'Unfreeze' if flag else 'Freeze'} {len(names)} entries"
        self._push(undo.FreezeStateCommand(self, text, lambda m: freezing.set_requires_grad(m, names, flag)))

    def freeze_all_except(self, path: str) -> None:
        """Freeze every parameter except those under ``path`` (which become trainable)."""
        if self.is_training():
            self.training_panel.queue_trainable([""], False)
            self.training_panel.queue_trainable([path], True)
            return
        self._push(undo.FreezeStateCommand(self, f"Freeze all except {path}",
                                           lambda m: freezing.freeze_all_except(m, path)))

    def freeze_before(self, path: str) -> None:
        """Freeze every parameter of the modules registered before ``path``."""
        if self._refuse_while_training("freeze everything before a module"):
            return
        self._push(undo.FreezeStateCommand(self, f"Freeze everything before {path}",
                                           lambda m: freezing.freeze_before(m, path)))

    def set_keep_bn_stats_fixed(self, flag: bool) -> None:
        """Keep BatchNorm statistics fixed (eval mode) for fully frozen BatchNorm layers while training."""
        self.keep_bn_stats_fixed = bool(flag)
        self.settings.setValue("keepBnStatsFixed", self.keep_bn_stats_fixed)
        self.keep_bn_action.setChecked(self.keep_bn_stats_fixed)

    # -- weights and structure --------------------------------------------------------
    def reinitialize(self, path: str, method: str = "reset_parameters", value: float | None = None) -> bool:
        """Re-initialize the parameters under ``path`` (``core.edits.reinitialize``); undoable."""
        if self._refuse_while_training("re-initialize weights"):
            return False
        if method == "constant_" and value is None:
            value = self._ask_float("Re-initialize", "Constant value:", 0.0)
            if value is None:
                return False
        return self._push(undo.ReinitializeCommand(self, path, method, value))

    def replace_head(self, path: str, num_outputs: int | None = None) -> bool:
        """Swap the Linear / 1x1 Conv2d at ``path`` for a new one with ``num_outputs`` outputs; undoable.

        Asks for the number of outputs when it is None. When ``path`` is the
        model's last layer with parameters, ``arch_spec`` gets ``num_classes``
        so a saved checkpoint reopens without questions.
        """
        if self._refuse_while_training("replace the head"):
            return False
        if num_outputs is None:
            num_outputs = self._ask_int("Replace head", f"Number of outputs of the new {path}:", 10)
            if num_outputs is None:
                return False
        return self._push(undo.ReplaceHeadCommand(self, path, int(num_outputs)))

    def head_replaced(self, path: str, num_outputs: int) -> None:
        """After a head swap: update ``arch_spec`` (``num_classes``) when ``path`` is the last layer, rebuild."""
        last = [name for name, m in self.model.named_modules() if any(True for _ in m.parameters(recurse=False))]
        if self.arch_spec is not None and last and last[-1] == path:
            self.arch_spec = replace(self.arch_spec, kwargs={**self.arch_spec.kwargs, "num_classes": num_outputs})
        self.structure_changed()

    def toggle_probe(self, name: str) -> None:
        """Probe on/off for module ``name`` (when the Probes panel exists)."""
        panel = self.probes_panel
        if panel is not None and hasattr(panel, "toggle_probe"):
            panel.toggle_probe(name)
