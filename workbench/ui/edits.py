"""ModelEdits: what the tree's checkboxes and context menu do to the session's model.

Every edit while idle is an undoable command (:mod:`workbench.ui.undo`) pushed
on the window's ``QUndoStack``. While a run owns the model, freezes become
:class:`~workbench.core.train.trainer.commands.SetTrainable` commands sent through the
session to the run (applied at the next step boundary) and structural edits
are refused with a status-bar message. Implements the tree view's
``TreeController`` protocol.
"""

from __future__ import annotations

from PySide6.QtCore import QSettings
from PySide6.QtGui import QUndoStack

from workbench.core.errors import WorkbenchError
from workbench.core.model import freezing
from workbench.core.train.trainer.commands import SetTrainable
from workbench.ui import undo
from workbench.ui.session import Session

__all__ = ["ModelEdits"]


class ModelEdits:
    """Freeze, re-initialize and replace-head edits of ``session.model``.

    Parameters
    ----------
    session : Session
    prompts : Prompts
        Asks for numbers and shows errors.
    undo_stack : QUndoStack
    settings : QSettings
        Remembers "Keep BatchNorm statistics fixed".
    """

    def __init__(self, session: Session, prompts, undo_stack: QUndoStack, settings: QSettings):
        self.session = session
        self.prompts = prompts
        self.undo_stack = undo_stack
        self.settings = settings
        session.set_keep_bn_stats_fixed(settings.value("keepBnStatsFixed", True, type=bool))

    @property
    def keep_bn_stats_fixed(self) -> bool:
        """Fully frozen BatchNorm layers keep their statistics while training."""
        return self.session.keep_bn_stats_fixed

    def _push(self, command: undo.ModelCommand) -> bool:
        """Apply ``command`` (errors shown, nothing pushed) and push it on the undo stack."""
        try:
            command.apply()
        except (WorkbenchError, ValueError) as exc:
            self.prompts.error(str(exc))
            self.session.trainableChanged.emit()
            return False
        self.undo_stack.push(command.applied())
        return True

    # -- freezing -----------------------------------------------------------------
    def set_trainable(self, path_or_names, flag: bool) -> None:
        """Freeze (``flag=False``) or unfreeze modules / parameters by qualified name.

        What the Train checkbox calls. While a run is active the change is sent to
        the run and shows once applied at the next step boundary; otherwise it is
        applied through ``core.model.freezing`` and pushed on the undo stack.

        Parameters
        ----------
        path_or_names : str or list of str
            A module or parameter qualified name (``""`` = the whole model), or several.
        flag : bool
            The new ``requires_grad``.
        """
        names = [path_or_names] if isinstance(path_or_names, str) else list(path_or_names)
        if self.session.running:
            self.session.send_command(SetTrainable(names, bool(flag)))
            self.session.show_status("Queued: applied at the next training step.", 4000)
            return
        if len(names) == 1:
            self._push(undo.SetTrainableCommand(self.session, names[0], bool(flag)))
            return
        text = f"{'Unfreeze' if flag else 'Freeze'} {len(names)} entries"
        self._push(undo.FreezeStateCommand(self.session, text, lambda m: freezing.set_requires_grad(m, names, flag)))

    def freeze_all_except(self, path: str) -> None:
        """Freeze every parameter except those under ``path`` (which become trainable)."""
        if self.session.running:
            self.session.send_command(SetTrainable([""], False))
            self.session.send_command(SetTrainable([path], True))
            return
        self._push(undo.FreezeStateCommand(self.session, f"Freeze all except {path}",
                                           lambda m: freezing.freeze_all_except(m, path)))

    def freeze_before(self, path: str) -> None:
        """Freeze every parameter of the modules registered before ``path``."""
        if self.session.refuse_while_running("freeze everything before a module"):
            return
        self._push(undo.FreezeStateCommand(self.session, f"Freeze everything before {path}",
                                           lambda m: freezing.freeze_before(m, path)))

    def set_keep_bn_stats_fixed(self, flag: bool) -> None:
        """Keep BatchNorm statistics fixed (eval mode) for fully frozen BatchNorm layers while training."""
        self.settings.setValue("keepBnStatsFixed", bool(flag))
        self.session.set_keep_bn_stats_fixed(bool(flag))

    # -- probes -------------------------------------------------------------------
    def is_probed(self, name: str) -> bool:
        """True when the probes follow module ``name``."""
        return name in self.session.probed

    def toggle_probe(self, name: str) -> None:
        """Probe on/off for module ``name`` (the Probes panel answers ``session.probeToggleRequested``)."""
        self.session.probeToggleRequested.emit(name)

    # -- weights and structure --------------------------------------------------------
    def reinitialize(self, path: str, method: str = "reset_parameters", value: float | None = None) -> bool:
        """Re-initialize the parameters under ``path`` (``core.model.edits.reinitialize``); undoable."""
        if self.session.refuse_while_running("re-initialize weights"):
            return False
        if method == "constant_" and value is None:
            value = self.prompts.number("Re-initialize", "Constant value:", 0.0)
            if value is None:
                return False
        return self._push(undo.ReinitializeCommand(self.session, path, method, value))

    def replace_head(self, path: str, num_outputs: int | None = None) -> bool:
        """Swap the Linear / 1x1 Conv2d at ``path`` for a new one with ``num_outputs`` outputs; undoable.

        Asks for the number of outputs when it is None.
        """
        if self.session.refuse_while_running("replace the head"):
            return False
        if num_outputs is None:
            num_outputs = self.prompts.integer("Replace head", f"Number of outputs of the new {path}:", 10)
            if num_outputs is None:
                return False
        return self._push(undo.ReplaceHeadCommand(self.session, path, int(num_outputs)))
