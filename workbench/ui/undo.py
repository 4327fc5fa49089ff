"""Undoable model edits (``QUndoCommand``\\ s) that act on the :class:`~workbench.ui.session.Session`.

Each command does its work in ``apply()`` and puts the model back in ``revert()``;
the edits themselves live in ``core`` (``core.model.freezing``,
``core.model.edits``). :class:`~workbench.ui.edits.ModelEdits` calls ``apply()``
first, inside a ``try`` (an edit the core refuses shows its message and is never
pushed), then pushes the command: the first ``redo()`` that ``QUndoStack.push``
makes is then a no-op. After each change the session emits the signal the
window redraws on (``trainableChanged``, ``weightsChanged``, ``structureChanged``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from PySide6.QtGui import QUndoCommand

from workbench.core.model import edits, freezing, names
from workbench.ui.session import Session


class ModelCommand(QUndoCommand):
    """Base class: ``apply()`` / ``revert()`` do the work, ``redo()`` skips the push-time call once applied."""

    def __init__(self, session: Session, text: str):
        super().__init__(text)
        self._session = session
        self._skip_redo = False

    def apply(self) -> None:
        """Do the edit (may raise ``WorkbenchError``)."""
        raise NotImplementedError

    def revert(self) -> None:
        """Undo the edit."""
        raise NotImplementedError

    def applied(self) -> ModelCommand:
        """Mark as already applied, so the push-time ``redo()`` does nothing; returns self."""
        self._skip_redo = True
        return self

    def redo(self) -> None:  # noqa: D102
        if self._skip_redo:
            self._skip_redo = False
            return
        self.apply()

    def undo(self) -> None:  # noqa: D102
        self.revert()


class SetTrainableCommand(ModelCommand):
    """Set ``requires_grad`` of a module / parameter path (``""`` = the whole model).

    Undo flips back exactly the parameters that changed.
    """

    def __init__(self, session: Session, path: str, flag: bool):
        what = path or "the whole model"
        super().__init__(session, f"{'Unfreeze' if flag else 'Freeze'} {what}")
        self._path, self._flag = path, flag
        self.changed: list[str] = []

    def apply(self) -> None:  # noqa: D102
        self.changed = freezing.set_trainable(self._session.model, self._path, self._flag)
        self._session.trainableChanged.emit()

    def revert(self) -> None:  # noqa: D102
        freezing.set_requires_grad(self._session.model, self.changed, not self._flag)
        self._session.trainableChanged.emit()


class FreezeStateCommand(ModelCommand):
    """Any ``core.model.freezing`` edit: undo restores the exact frozen set from before.

    Parameters
    ----------
    session : Session
    text : str
        Shown in Edit > Undo.
    apply : callable
        ``apply(model) -> list[str]`` (e.g. ``lambda m: freezing.freeze_before(m, path)``).
    """

    def __init__(self, session: Session, text: str, apply: Callable):
        super().__init__(session, text)
        self._apply = apply
        self._before: list[str] = []

    def apply(self) -> None:  # noqa: D102
        self._before = names.frozen_names(self._session.model)
        self._apply(self._session.model)
        self._session.trainableChanged.emit()

    def revert(self) -> None:  # noqa: D102
        freezing.apply_frozen(self._session.model, self._before)
        self._session.trainableChanged.emit()


class ReinitializeCommand(ModelCommand):
    """Re-initialize a module's parameters (``core.model.edits.reinitialize``); undo restores the old values."""

    def __init__(self, session: Session, path: str, method: str, value: float | None = None):
        super().__init__(session, f"Re-initialize {path or 'the whole model'} ({method})")
        self._path, self._method, self._value = path, method, value
        self._old: dict | None = None
        self._new: dict | None = None

    def apply(self) -> None:  # noqa: D102
        module = edits.get_module(self._session.model, self._path)
        if self._new is None:
            self._old = edits.reinitialize(module, self._method, self._value)
        else:
            self._old = edits.restore_tensors(module, self._new)
        self._session.weightsChanged.emit()

    def revert(self) -> None:  # noqa: D102
        module = edits.get_module(self._session.model, self._path)
        self._new = edits.restore_tensors(module, self._old)
        self._session.weightsChanged.emit()


class ReplaceHeadCommand(ModelCommand):
    """Swap a classifier layer for a new one with N outputs; undo puts the old layer back.

    When the layer is the model's last one with parameters, the session's
    ``arch_spec`` gets ``num_classes``, so a saved checkpoint reopens without
    questions; the edit is recorded in ``session.edits`` either way, so a run
    replays it.
    """

    def __init__(self, session: Session, path: str, num_outputs: int):
        super().__init__(session, f"Replace head {path} ({num_outputs} outputs)")
        self._path, self._n = path, num_outputs
        self._old = None
        self._new = None
        self._old_spec = session.arch_spec
        self._edit = {"op": "replace_head", "path": path, "num_outputs": int(num_outputs)}

    def apply(self) -> None:  # noqa: D102
        session = self._session
        model = session.model
        if self._new is None:
            self._old = edits.replace_head(model, self._path, self._n)
            self._new = edits.get_module(model, self._path)
        else:
            edits.swap_module(model, self._path, self._new)
        spec = session.arch_spec
        if spec is not None and edits.is_last_layer(model, self._path):
            session.set_arch_spec(replace(spec, kwargs={**spec.kwargs, "num_classes": self._n}))
        session.record_edit(self._edit)

    def revert(self) -> None:  # noqa: D102
        edits.swap_module(self._session.model, self._path, self._old)
        self._session.set_arch_spec(self._old_spec)
        self._session.undo_edit(self._edit)
