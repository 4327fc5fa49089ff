"""Undoable model edits (``QUndoCommand``s) pushed on ``MainWindow.undo_stack``.

Each command does its work in ``apply()`` and puts the model back in ``revert()``.
The window calls ``apply()`` first, inside a ``try`` (an edit the core refuses
shows its message and is never pushed), then pushes the command: the first
``redo()`` that ``QUndoStack.push`` makes is then a no-op. The edits themselves
live in ``core`` (``core.freezing``, ``core.edits``); after each one the window
refreshes the tree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from PySide6.QtGui import QUndoCommand

from workbench.core.model import edits, freezing

if TYPE_CHECKING:  # pragma: no cover
    from workbench.ui.main_window import MainWindow


class ModelCommand(QUndoCommand):
    """Base class: ``apply()`` / ``revert()`` do the work, ``redo()`` skips the push-time call once applied."""

    def __init__(self, window: MainWindow, text: str):
        super().__init__(text)
        self._window = window
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

    def __init__(self, window: MainWindow, path: str, flag: bool):
        what = path or "the whole model"
        super().__init__(window, f"{'Unfreeze' if flag else 'Freeze'} {what}")
        self._path, self._flag = path, flag
        self.changed: list[str] = []

    def apply(self) -> None:  # noqa: D102
        self.changed = freezing.set_trainable(self._window.model, self._path, self._flag)
        self._window.refresh_tree()

    def revert(self) -> None:  # noqa: D102
        freezing.set_requires_grad(self._window.model, self.changed, not self._flag)
        self._window.refresh_tree()


class FreezeStateCommand(ModelCommand):
    """Any ``core.freezing`` edit: undo restores the exact frozen set from before.

    Parameters
    ----------
    window : MainWindow
    text : str
        Shown in Edit > Undo.
    apply : callable
        ``apply(model) -> list[str]`` (e.g. ``lambda m: freezing.freeze_before(m, path)``).
    """

    def __init__(self, window: MainWindow, text: str, apply: Callable):
        super().__init__(window, text)
        self._apply = apply
        self._before: list[str] = []

    def apply(self) -> None:  # noqa: D102
        self._before = names.frozen_names(self._window.model)
        self._apply(self._window.model)
        self._window.refresh_tree()

    def revert(self) -> None:  # noqa: D102
        freezing.apply_frozen(self._window.model, self._before)
        self._window.refresh_tree()


class ReinitializeCommand(ModelCommand):
    """Re-initialize a module's parameters (``core.edits.reinitialize``); undo restores the old values."""

    def __init__(self, window: MainWindow, path: str, method: str, value: float | None = None):
        super().__init__(window, f"Re-initialize {path or 'the whole model'} ({method})")
        self._path, self._method, self._value = path, method, value
        self._old: dict | None = None
        self._new: dict | None = None

    def apply(self) -> None:  # noqa: D102
        module = edits.get_module(self._window.model, self._path)
        if self._new is None:
            self._old = edits.reinitialize(module, self._method, self._value)
        else:
            self._old = edits.restore_tensors(module, self._new)
        self._window.refresh_tree()

    def revert(self) -> None:  # noqa: D102
        module = edits.get_module(self._window.model, self._path)
        self._new = edits.restore_tensors(module, self._old)
        self._window.refresh_tree()


class ReplaceHeadCommand(ModelCommand):
    """Swap a classifier layer for a new one with N outputs; undo puts the old layer back."""

    def __init__(self, window: MainWindow, path: str, num_outputs: int):
        super().__init__(window, f"Replace head {path} ({num_outputs} outputs)")
        self._path, self._n = path, num_outputs
        self._old = None
        self._new = None
        self._old_spec = window.arch_spec

    def apply(self) -> None:  # noqa: D102
        model = self._window.model
        if self._new is None:
            self._old = edits.replace_head(model, self._path, self._n)
            self._new = edits.get_module(model, self._path)
        else:
            edits.swap_module(model, self._path, self._new)
        self._window.head_replaced(self._path, self._n)

    def revert(self) -> None:  # noqa: D102
        edits.swap_module(self._window.model, self._path, self._old)
        self._window.arch_spec = self._old_spec
        self._window.structure_changed()
