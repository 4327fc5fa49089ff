"""ModelEdits: what the tree's checkboxes and context menu do to the session's model.

Every edit while idle is an undoable command (:mod:`workbench.ui.undo`) pushed
on the window's ``QUndoStack``. While a run owns the model, freezes become
:class:`~workbench.core.train.trainer.commands.SetTrainable` commands sent through the
session to the run (applied at the next step boundary) and structural edits
are refused with a status-bar message. Implements the tree view's
``TreeController`` protocol.

LoRA adapters (:mod:`workbench.core.model.lora`, peft) are a structural edit
like a replaced head: recorded in ``session.edits`` as ``{"op": "add_lora", ...}``
(so a run replays them before loading its ``init.pt``), undone by putting the
very base modules back and restoring the trainable set from before.
"""

from __future__ import annotations

from PySide6.QtCore import QSettings
from PySide6.QtGui import QUndoStack

from workbench.core.errors import WorkbenchError
from workbench.core.model import edits as core_edits
from workbench.core.model import freezing, lora
from workbench.core.train.trainer.commands import SetTrainable
from workbench.ui import dialogs, undo
from workbench.ui.session import Session

__all__ = ["ModelEdits", "AddLoraCommand"]


class AddLoraCommand(undo.ModelCommand):
    """Put LoRA adapters on exact module paths (``core.model.lora.add_lora``); undo takes them off.

    Undo puts back the very base modules (their weights untouched) and exactly
    the trainable set from before; redo puts back the same adapter layers (their
    trained values kept) and the frozen set right after the first apply.

    Parameters
    ----------
    session : Session
    paths : list of str
        Exact qualified names (``core.model.lora.lora_targets``).
    r, alpha, dropout
        See ``core.model.lora.add_lora``.
    """

    def __init__(self, session: Session, paths: list[str], r: int, alpha: float, dropout: float):
        where = paths[0] if len(paths) == 1 else f"{len(paths)} modules"
        super().__init__(session, f"Add LoRA adapters to {where} (r={r})")
        self._paths, self._numbers = list(paths), (int(r), float(alpha), float(dropout))
        self._edit = lora.lora_edit(paths, r, alpha, dropout)
        self._trainable_before: list[str] = []
        self._layers: dict = {}
        self._frozen_after: list[str] = []

    def apply(self) -> None:  # noqa: D102
        model = self._session.model
        if not self._layers:
            r, alpha, dropout = self._numbers
            self._trainable_before = lora.add_lora(model, self._paths, r=r, alpha=alpha, dropout=dropout)
            self._layers = {p: model.get_submodule(p) for p in self._paths}
            self._frozen_after = [n for n, p in model.named_parameters() if not p.requires_grad]
        else:
            for path, layer in self._layers.items():
                core_edits.swap_module(model, path, layer)
            freezing.apply_frozen(model, self._frozen_after, strict=False)
        self._session.record_edit(self._edit)
        self._session.trainableChanged.emit()

    def revert(self) -> None:  # noqa: D102
        lora.remove_lora(self._session.model, self._paths, trainable=self._trainable_before)
        self._session.undo_edit(self._edit)
        self._session.trainableChanged.emit()


class ModelEdits:
    """Freeze, re-initialize, replace-head and LoRA edits of ``session.model``.

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

    def freeze_first_blocks(self, n: int | None = None) -> bool:
        """Freeze the embeddings and the first ``n`` repeated blocks (asked when None); undoable.

        :func:`workbench.core.model.freezing.freeze_first_blocks`; the question offers two thirds of the
        blocks (MiniLM's 6 layers: 4). Returns True when the freeze was made.
        """
        from workbench.core.model.blocks import repeated_blocks

        if self.session.refuse_while_running("freeze the first blocks"):
            return False
        blocks = repeated_blocks(self.session.model) if self.session.model is not None else []
        if not blocks:
            self.prompts.error("Freeze the first blocks: this model has no repeated blocks (a ModuleList or "
                               "Sequential of one class); freeze with the tree's checkboxes.")
            return False
        container = blocks[0][0].rpartition(".")[0] or "(model)"
        if n is None:
            n = self.prompts.integer("Freeze embeddings and the first blocks",
                                     f"Blocks of {container} to freeze, with everything before them "
                                     f"(1-{len(blocks)}):", max(1, len(blocks) * 2 // 3))
            if n is None:
                return False
        if not 1 <= int(n) <= len(blocks):
            self.prompts.error(f"Freeze the first blocks: {container} has {len(blocks)} blocks; choose 1 to "
                               f"{len(blocks)}, not {n}.")
            return False
        self._push(undo.FreezeStateCommand(self.session, f"Freeze embeddings and the first {n} blocks",
                                           lambda m: freezing.freeze_first_blocks(m, int(n))))
        return True

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

    def add_lora(self, paths: str | list[str], options: dialogs.LoraOptions | None = None) -> bool:
        """LoRA adapters on the modules of ``options.types`` at or below ``paths``; undoable.

        Asks for the options (rank, alpha, dropout, types, names) when None:
        ``prompts.lora(path, types, present)`` when the prompts have it, else
        :func:`workbench.ui.dialogs.ask_lora`. Errors (peft missing, nothing to
        adapt) are shown and change nothing.

        Returns
        -------
        bool
            True when adapters were added.
        """
        if self.session.refuse_while_running("add LoRA adapters"):
            return False
        paths = [paths] if isinstance(paths, str) else list(paths)
        model = self.session.model
        try:
            if options is None:
                options = self._ask_lora(paths, model)
                if options is None:
                    return False
            targets = lora.lora_targets(model, paths, tuple(options.types), tuple(options.names))
        except WorkbenchError as exc:
            self.prompts.error(str(exc))
            return False
        return self._push(AddLoraCommand(self.session, targets, options.r, options.alpha, options.dropout))

    def _ask_lora(self, paths: list[str], model) -> dialogs.LoraOptions | None:
        present = sorted({t for p in paths for t in lora.types_under(model, p)})
        if not present:
            raise WorkbenchError(f"LoRA: no {', '.join(lora.LORA_TYPES)} module without adapters under "
                                 f"{', '.join(p or '(model)' for p in paths)}.")
        target = paths[0] if len(paths) == 1 else f"{len(paths)} modules"
        ask = getattr(self.prompts, "lora", None)
        if callable(ask):
            return ask(target, lora.LORA_TYPES, present)
        return dialogs.ask_lora(target, lora.LORA_TYPES, present, getattr(self.prompts, "parent", None))
