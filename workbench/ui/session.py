"""Session: the opened model and what the window knows about it, with change signals.

One ``Session`` per window (napari's ``ViewerModel``): the model shown, its
architecture, the checkpoint it came from, the example input shape, the edits
made to its structure, whether a run owns it, the probe badges and probed
modules. Panels take the session (and the prompts), never the window, and talk
to each other only through its signals, so each panel is built in a test with
a ``Session()`` and nothing else. The session shows nothing and computes
nothing itself.
"""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import QObject, Signal
from torch import nn

from workbench.core.model.example_input import default_input_shape

__all__ = ["Session"]


class Session(QObject):
    """The opened model and its state.

    Attributes
    ----------
    model : nn.Module or None
        The module shown (owned by the training thread while :attr:`running`).
    arch_spec : ArchSpec or None
        How to build it again (None: weights-only tree, or a module stored whole).
    checkpoint : Checkpoint or None
        The file it was opened from (None for the demo and new models).
    input_shape : tuple of int or None
        Example input, e.g. ``(1, 1, 8, 8)``, that filled Output shape and FLOPs
        (``(N, L)`` int64 token ids for an embedding model).
    source : str
        What the status bar says about the model, e.g. ``"resnet18.pt · state_dict"``.
    edits : list of dict
        Structural edits since it was opened (``{"op": "replace_head", ...}``); a
        run records them so ``workbench train run.toml`` rebuilds the same model.
    running : bool
        A training run owns the model.
    keep_bn_stats_fixed : bool
        Fully frozen BatchNorm layers keep their statistics (``eval()``) while training.
    run_extras : dict
        The last run's optimizer / scheduler state, epoch, step and loss (CPU
        copies), saved with the model; ``{}`` before a run and after a new model.
    tree_root : ModuleNode or None
        The module tree shown (``core.model.tree``), with shapes and FLOPs.
    badges : dict
        ``{module name: [Badge, ...]}`` shown in the tree: the opened weights'
        own (NaN/Inf at open) and then the last probe measurement's.
    measured_badges : dict
        The last probe measurement's alone.
    probed : list of str
        Modules followed by the probes.

    Signals
    -------
    modelChanged()
        Another model is shown (open, new, demo).
    structureChanged()
        The module tree of the same model changed (head replaced or put back).
    trainableChanged()
        ``requires_grad`` of some parameters changed (an idle edit or an applied command).
    weightsChanged()
        Parameter values changed in place (re-initialized, or a run ended).
    runningChanged(bool)
    badgesChanged(dict), probedChanged(list)
    selectionChanged(object)
        The tree's current row (a ``ModuleNode`` or a parameter row), or None.
    probeReports(list)
        Live probe reports measured by the training loop (grad norms, activations).
    statusMessage(str, int)
        A line for the status bar and how long to show it (ms; 0 = until replaced).
    commandRequested(object)
        A core command (``SetTrainable``, ``SaveNow``...) for the active run.
    probeToggleRequested(str)
        Probe on/off for a module (from the tree's context menu).
    replaceHeadRequested(int)
        Replace the model's last layer by one with this many outputs (the answer to a class-count mismatch).
    keepBnStatsFixedChanged(bool)
    """

    modelChanged = Signal()
    structureChanged = Signal()
    trainableChanged = Signal()
    weightsChanged = Signal()
    runningChanged = Signal(bool)
    badgesChanged = Signal(dict)
    probedChanged = Signal(list)
    selectionChanged = Signal(object)
    revealRequested = Signal(str, int)
    comparisonChanged = Signal(object)
    probeReports = Signal(list)
    statusMessage = Signal(str, int)
    commandRequested = Signal(object)
    probeToggleRequested = Signal(str)
    replaceHeadRequested = Signal(int)
    keepBnStatsFixedChanged = Signal(bool)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        #: ``{module: ModuleChange}`` against another checkpoint ("Compare with…"), or None
        self.comparison: dict | None = None
        self.comparison_source = ""
        self.model: nn.Module | None = None
        self.arch_spec = None
        self.checkpoint = None
        self.input_shape: tuple[int, ...] | None = None
        #: the example input the opened file gives (a Hugging Face config's input_ids...), used while no shape is typed
        self.example = None
        self.source = ""
        self.edits: list[dict] = []
        self.running = False
        self.keep_bn_stats_fixed = True
        self._data_config_source: Callable[[], Any] | None = None
        self.run_extras: dict = {}
        self.tree_root = None
        self.badges: dict = {}
        self._weight_badges: dict = {}  # the open-time NaN/Inf scan of the weights: kept across measurements
        self.measured_badges: dict = {}  # the last measurement's alone (what set_badges was given)
        self.probed: list[str] = []
        self._callback_providers: list[Callable[[], list]] = []

    # ------------------------------------------------------------------ the model
    def set_model(self, model: nn.Module, spec=None, checkpoint=None, input_shape=None, source: str = "",
                  example=None) -> None:
        """Show another model: forget edits, badges and probes; emit ``modelChanged``.

        Without an ``input_shape`` the file's own ``example`` is used (an
        :class:`~workbench.core.model.example_input.ExampleInput` a Hugging Face
        folder's config gives: ``input_ids``, ``pixel_values``...), else the model's
        own hint (:func:`workbench.core.model.example_input.default_input_shape`:
        ``(1, 16)`` token ids for a model whose first layer is an ``nn.Embedding``).
        """
        self.model, self.arch_spec, self.checkpoint = model, spec, checkpoint
        self.example = example if not input_shape else None
        hinted = default_input_shape(model) if model is not None and self.example is None else None
        self.input_shape = tuple(input_shape) if input_shape else hinted
        self.source = source
        self.edits = []
        self.badges = {}
        self._weight_badges = {}
        self.measured_badges = {}
        self.run_extras = {}
        if self.comparison is not None:
            self.set_comparison(None)  # a comparison belongs to the model it was made with
        self.modelChanged.emit()

    def set_arch_spec(self, spec) -> None:
        """Replace the architecture spec (a replaced head changes ``num_classes``)."""
        self.arch_spec = spec

    def record_edit(self, edit: dict) -> None:
        """Append a structural edit (see :attr:`edits`) and emit ``structureChanged``."""
        self.edits.append(dict(edit))
        self.structureChanged.emit()

    def undo_edit(self, edit: dict) -> None:
        """Forget the last record of ``edit`` (its undo) and emit ``structureChanged``."""
        for i in range(len(self.edits) - 1, -1, -1):
            if self.edits[i] == edit:
                del self.edits[i]
                break
        self.structureChanged.emit()

    def set_running(self, running: bool) -> None:
        """A run started (True) or ended (False); emits ``runningChanged`` on a change."""
        if bool(running) != self.running:
            self.running = bool(running)
            self.runningChanged.emit(self.running)

    def send_command(self, command: Any) -> None:
        """Send a core command to the active run (the Training panel queues it on its worker)."""
        self.commandRequested.emit(command)

    def set_keep_bn_stats_fixed(self, flag: bool) -> None:
        """Fully frozen BatchNorm layers keep their statistics (``eval()``) in the next runs."""
        if bool(flag) != self.keep_bn_stats_fixed:
            self.keep_bn_stats_fixed = bool(flag)
            self.keepBnStatsFixedChanged.emit(self.keep_bn_stats_fixed)

    def refuse_while_running(self, what: str) -> bool:
        """True (and a status-bar line "Stop the training run to <what>.") while a run owns the model."""
        if self.running:
            self.show_status(f"Stop the training run to {what}.", 8000)
        return self.running

    def set_input_shape(self, shape: tuple[int, ...] | None) -> None:
        """The example input shape, e.g. ``(1, 3, 224, 224)`` (no signal: the tree re-annotates); a typed
        shape replaces the file's own example input."""
        self.input_shape = tuple(shape) if shape else None
        if shape:
            self.example = None

    # ------------------------------------------------------------------ probes and selection
    def set_badges(self, badges: dict) -> None:
        """Health badges of the last measurement, ``{module: [Badge, ...]}``.

        Shown after the weight badges of :meth:`set_weight_badges` on the same
        module, which a measurement never drops.
        """
        self.measured_badges = dict(badges)
        names = list(self._weight_badges) + [n for n in badges if n not in self._weight_badges]
        self.badges = {n: [*self._weight_badges.get(n, ()), *badges.get(n, ())] for n in names}
        self.badgesChanged.emit(self.badges)

    def set_weight_badges(self, badges: dict) -> None:
        """Badges of the opened weights themselves (NaN/Inf found at open), kept until another model is shown."""
        self._weight_badges = dict(badges)
        self.set_badges({})

    def set_probed(self, names: list[str]) -> None:
        """The modules the probes follow."""
        self.probed = list(names)
        self.probedChanged.emit(list(self.probed))

    def select(self, obj: Any) -> None:
        """The tree's current row changed (a ``ModuleNode``, a parameter row or None)."""
        self.selectionChanged.emit(obj)

    def set_comparison(self, changes: dict | None, source: str = "") -> None:
        """The per-module change against another checkpoint (``{module: ModuleChange}``; None: no comparison)."""
        self.comparison = dict(changes) if changes is not None else None
        self.comparison_source = source if changes is not None else ""
        self.comparisonChanged.emit(self.comparison)

    def reveal(self, name: str, step: int = -1) -> None:
        """Ask the window to select module ``name`` in the tree and the probes to show it (at ``step``; -1: latest)."""
        self.revealRequested.emit(str(name), int(step))

    def show_status(self, text: str, ms: int = 0) -> None:
        """Ask the window to show ``text`` on its status bar for ``ms`` milliseconds."""
        self.statusMessage.emit(text, int(ms))

    # ------------------------------------------------------------------ training settings
    def set_data_config_source(self, source: Callable[[], Any]) -> None:
        """Register ``source() -> DataConfig``: the dataset of the training settings form."""
        self._data_config_source = source

    def data_config(self):
        """The training settings' ``DataConfig`` (the probes' "dataset batch" uses it), or None.

        Raises
        ------
        ValueError
            A setting of the form is invalid (the message names it).
        """
        return self._data_config_source() if self._data_config_source is not None else None

    # ------------------------------------------------------------------ training callbacks
    def add_callback_provider(self, provider: Callable[[], list]) -> None:
        """Register ``provider() -> list of core Callback`` to join every run (the probes' live callback)."""
        self._callback_providers.append(provider)

    def training_callbacks(self) -> list:
        """The core callbacks every registered provider gives for the next run."""
        return [cb for provider in self._callback_providers for cb in provider()]
