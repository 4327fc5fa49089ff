"""``ModelTreeModel``: a QAbstractItemModel over ``core.model.tree.ModuleNode``.

A thin adapter in the napari style: ``index()`` stores node objects with
``createIndex(row, col, node)``, ``parent()`` uses ``node.parent.index_in_parent()``.
Children are produced on demand (the view only asks for rows it shows), so a
model with tens of thousands of modules opens at once.

Rows: the model's root module is the single top-level row; under each module
come its child modules (registration order), then its own parameters as leaf
rows (``ParamRow``).
"""

from __future__ import annotations

import math
from typing import Callable, Iterable

from PySide6.QtCore import QAbstractItemModel, QModelIndex, QPersistentModelIndex, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QIcon, QPainter, QPixmap

from workbench.core.formatting import format_bytes, format_count, format_flops, format_int, format_shape
from workbench.core.model.flops import FLOPS_CONVENTION, macs
from workbench.core.model import tree as core_summary
from workbench.core.model.diff import subtree_changes

#: The Train checkbox sits next to the name, where the eye is (it was the last column, off-screen
#: in a 676 px wide tree at the first-launch 1500x900 window).
COLUMNS = ("Name", "Train", "Type", "Output shape", "Params", "Trainable", "FLOPs", "Memory", "Change")
(COL_NAME, COL_TRAIN, COL_TYPE, COL_SHAPE, COL_PARAMS, COL_TRAINABLE, COL_FLOPS, COL_MEMORY,
 COL_CHANGE) = range(len(COLUMNS))
NUMERIC_COLUMNS = (COL_PARAMS, COL_TRAINABLE, COL_FLOPS, COL_MEMORY, COL_CHANGE)
#: What the Memory column shows, as its header's tooltip.
MEMORY_TIP = ("Memory of a training step (workbench.core.model.memory.estimate_memory): parameters + gradients + "
              "optimizer state + activations saved for backward, for the Training panel's batch size, optimizer "
              "and precision; each module sums the modules below it")
#: What the Change column shows ("Compare with…"), as its header's tooltip.
CHANGE_TIP = ("Relative change ||a - b|| / ||a|| against the compared checkpoint: on each module the largest "
              "change at or below it (its own parameters, else its buffers); the tooltip names where it is")

DISPLAY = Qt.ItemDataRole.DisplayRole.value
TOOLTIP = Qt.ItemDataRole.ToolTipRole.value
CHECK = Qt.ItemDataRole.CheckStateRole.value
ALIGN = Qt.ItemDataRole.TextAlignmentRole.value
FOREGROUND = Qt.ItemDataRole.ForegroundRole.value
DECORATION = Qt.ItemDataRole.DecorationRole.value
FONT = Qt.ItemDataRole.FontRole.value
BACKGROUND = Qt.ItemDataRole.BackgroundRole.value
#: Custom roles: the row object, a numeric sort key, the text the filter box matches.
NODE_ROLE = Qt.ItemDataRole.UserRole.value + 1
SORT_ROLE = Qt.ItemDataRole.UserRole.value + 2
FILTER_ROLE = Qt.ItemDataRole.UserRole.value + 3

_RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
_CENTER = Qt.AlignmentFlag.AlignCenter
_CHECK_STATES = (Qt.CheckState.Unchecked, Qt.CheckState.PartiallyChecked, Qt.CheckState.Checked)
#: Text colour of each badge kind in the tree and the Details panel.
BADGE_COLORS = {"nonfinite": "#d32f2f", "exploding_grad": "#f57c00", "vanishing_grad": "#1976d2",
                 "dead_units": "#7b1fa2"}
_BADGE_ORDER = ("nonfinite", "exploding_grad", "vanishing_grad", "dead_units")


class ParamRow:
    """A parameter leaf row: ``info`` (``core.model.tree.TensorInfo``) under module node ``owner``.

    A tied parameter (one ``nn.Parameter`` that ``owner`` shares with an earlier
    module, e.g. a decoder's weight tied to the embedding) is listed under every
    module that holds it: ``alias`` is its short name here (``"weight"``) and
    ``info`` the canonical entry, counted once, under the first owner.
    """

    __slots__ = ("owner", "info", "row", "alias")

    def __init__(self, owner, info, row: int, alias: str | None = None):
        self.owner = owner
        self.info = info
        self.row = row
        self.alias = alias

    @property
    def short_name(self) -> str:
        """The name shown in the tree: the alias of a tied parameter, else its own short name."""
        return self.alias or self.info.short_name

    @property
    def path(self) -> str:
        """Qualified name of this row's parameter as ``owner`` holds it (an alias for a tied one)."""
        if self.alias is None:
            return self.info.name
        return f"{self.owner.name}.{self.alias}" if self.owner.name else self.alias


def _param_count(node) -> int:
    """Parameter rows under ``node``: its own parameters and the tied ones it shares."""
    return len(node.params) + sum(1 for _, info in node.tied if not info.is_buffer)


def _badge_icon(kind: str) -> QIcon:
    """A 12 px filled circle in the badge's colour."""
    pix = QPixmap(12, 12)
    pix.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pix)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setBrush(QColor(BADGE_COLORS.get(kind, "#616161")))
    painter.setPen(Qt.PenStyle.NoPen)
    painter.drawEllipse(1, 1, 10, 10)
    painter.end()
    return QIcon(pix)


def _check_value(value) -> int:
    """Qt passes a check state as an int or a ``Qt.CheckState``; return 0, 1 or 2."""
    return int(getattr(value, "value", value))


class ModelTreeModel(QAbstractItemModel):
    """The module tree of a model, with a tri-state Train checkbox per row.

    Parameters
    ----------
    root : ModuleNode
        From ``core.model.tree.build_summary(model)``.
    set_trainable : callable, optional
        ``set_trainable(path, flag)`` is called when the user ticks a Train
        checkbox (``path`` is a module or parameter qualified name, ``""`` for
        the whole model). The callee applies or queues the change and then
        calls :meth:`refresh_trainable`. Without one, ``core.model.freezing`` is
        applied directly.
    parent : QObject, optional

    Signals
    -------
    badgesChanged()
        :meth:`set_badges` replaced the badges.
    """

    badgesChanged = Signal()

    def __init__(self, root, set_trainable: Callable[[str, bool], None] | None = None, parent=None):
        super().__init__(parent)
        self._root = root
        self._set_trainable = set_trainable
        self._param_rows: dict[int, list[ParamRow]] = {}
        self._touched: dict[int, object] = {}   # modules whose children the view has asked for
        self._badges: dict[str, list] = {}
        self._changes: dict = {}  # module -> ModuleChange ("Compare with…")
        self._subtree: dict = {}  # module -> SubtreeChange: the largest change at or below it
        self._memory = None  # the MemoryEstimate shown in the Memory column (set_memory)
        #: frozen BatchNorm layers keep their statistics (the window follows its setting)
        self.bn_stats_fixed = True
        self._probed: frozenset[str] = frozenset()
        self._probed_font: QFont | None = None
        self._icons: dict[str, QIcon] = {}
        self._frozen_brush = QBrush(QColor(150, 150, 150))
        self._visible_parents: Callable[[], Iterable] | None = None

    def set_visible_parents_provider(self, provider: Callable[[], Iterable] | None) -> None:
        """Tell the model which parent nodes a view shows rows of.

        Parameters
        ----------
        provider : callable or None
            Returns the ``ModuleNode`` parents of the rows currently on screen.
            :meth:`refresh_trainable` then repaints only those ranges (a few
            dozen) instead of every range ever fetched. None: every fetched range.
        """
        self._visible_parents = provider

    # -- structure -----------------------------------------------------------
    @property
    def root(self):
        """The ``ModuleNode`` of the whole model."""
        return self._root

    def set_root(self, root) -> None:
        """Show another summary tree (a new model, or the same model after a head swap)."""
        self.beginResetModel()
        self._root = root
        self._param_rows.clear()
        self._touched.clear()
        self.endResetModel()

    def _params_of(self, node) -> list[ParamRow]:
        rows = self._param_rows.get(id(node))
        if rows is None:
            base = len(node.children)
            rows = [ParamRow(node, info, base + i) for i, info in enumerate(node.params)]
            rows += [ParamRow(node, info, base + len(rows) + i, alias=short)
                     for i, (short, info) in enumerate((s, f) for s, f in node.tied if not f.is_buffer)]
            self._param_rows[id(node)] = rows
        return rows

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: B008 - Qt signature
        if parent.column() > 0:
            return 0
        if not parent.isValid():
            return 1 if self._root is not None else 0
        node = parent.internalPointer()
        if isinstance(node, ParamRow):
            return 0
        self._touched[id(node)] = node
        return len(node.children) + _param_count(node)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: B008
        return len(COLUMNS)

    def hasChildren(self, parent=QModelIndex()) -> bool:  # noqa: B008
        if not parent.isValid():
            return self._root is not None
        if parent.column() > 0:
            return False
        node = parent.internalPointer()
        return not isinstance(node, ParamRow) and bool(node.children or _param_count(node))

    def index(self, row: int, column: int, parent=QModelIndex()) -> QModelIndex:  # noqa: B008
        if not parent.isValid():
            if row == 0 and 0 <= column < len(COLUMNS) and self._root is not None:
                return self.createIndex(0, column, self._root)
            return QModelIndex()
        node = parent.internalPointer()
        if isinstance(node, ParamRow) or not 0 <= column < len(COLUMNS):
            return QModelIndex()
        n = len(node.children)
        if 0 <= row < n:
            return self.createIndex(row, column, node.children[row])
        params = self._params_of(node)
        if n <= row < n + len(params):
            return self.createIndex(row, column, params[row - n])
        return QModelIndex()

    def parent(self, index=None):  # noqa: D102 - QObject.parent() without an argument
        if index is None:
            return super().parent()
        if not index.isValid():
            return QModelIndex()
        obj = index.internalPointer()
        owner = obj.owner if isinstance(obj, ParamRow) else obj.parent
        if owner is None:
            return QModelIndex()
        return self.createIndex(self._row_of(owner), 0, owner)

    def _row_of(self, node) -> int:
        return 0 if node.parent is None else node.index_in_parent()

    def index_for_node(self, node, column: int = 0) -> QModelIndex:
        """The index of a ``ModuleNode`` (or ``ParamRow``) in this model."""
        if isinstance(node, ParamRow):
            return self.createIndex(node.row, column, node)
        return self.createIndex(self._row_of(node), column, node)

    def index_for_name(self, name: str, column: int = 0) -> QModelIndex:
        """The index of the module or parameter with qualified ``name`` (invalid if none)."""
        node = self._root.find(name) if self._root is not None else None
        if node is not None:
            return self.index_for_node(node, column)
        owner_name, _, short = name.rpartition(".")
        owner = self._root.find(owner_name) if self._root is not None else None
        for prow in self._params_of(owner) if owner is not None else ():
            if prow.short_name == short:
                return self.index_for_node(prow, column)
        return QModelIndex()

    # -- data ------------------------------------------------------------------
    def headerData(self, section: int, orientation, role: int = DISPLAY):  # noqa: D102
        if orientation == Qt.Orientation.Horizontal and 0 <= section < len(COLUMNS):
            if role == DISPLAY:
                return COLUMNS[section]
            if role == ALIGN and section in NUMERIC_COLUMNS:
                return _RIGHT
            if role == TOOLTIP and section == COL_FLOPS:
                return f"{FLOPS_CONVENTION} of one forward on the example input; multiply-adds are half"
            if role == TOOLTIP and section == COL_CHANGE:
                return CHANGE_TIP
            if role == TOOLTIP and section == COL_MEMORY:
                return MEMORY_TIP
        return None

    def flags(self, index: QModelIndex):  # noqa: D102
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        base = Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable
        if index.column() == COL_TRAIN and self._has_checkbox(index.internalPointer()):
            base |= Qt.ItemFlag.ItemIsUserCheckable
        return base

    @staticmethod
    def _has_checkbox(obj) -> bool:
        """Parameters and modules with parameters below (or tied ones) have a Train checkbox."""
        return isinstance(obj, ParamRow) or obj.total_params > 0 or core_summary.train_state(obj) is not None

    @staticmethod
    def check_state(obj) -> Qt.CheckState | None:
        """Train state of a row: Checked (all below trainable), Unchecked (none), PartiallyChecked."""
        if isinstance(obj, ParamRow):
            return Qt.CheckState.Checked if obj.info.requires_grad else Qt.CheckState.Unchecked
        state = core_summary.train_state(obj)
        return None if state is None else _CHECK_STATES[state]

    def data(self, index: QModelIndex, role: int = DISPLAY):  # noqa: D102
        if not index.isValid():
            return None
        obj = index.internalPointer()
        col = index.column()
        if col == COL_CHANGE:
            return self._change_data(obj, role)
        if col == COL_MEMORY and role in (DISPLAY, TOOLTIP, SORT_ROLE):
            return self._memory_data(obj, role)
        if role == DISPLAY:
            return self._param_text(obj, col) if isinstance(obj, ParamRow) else self._module_text(obj, col)
        if role == CHECK:
            return self.check_state(obj) if col == COL_TRAIN else None
        if role == ALIGN:
            return _RIGHT if col in NUMERIC_COLUMNS else (_CENTER if col == COL_TRAIN else None)
        if role == FOREGROUND:
            return self._frozen_brush if self._is_frozen(obj) else None
        if role == TOOLTIP:
            return self._tooltip(obj, col)
        if role == DECORATION:
            return self._badge_decoration(obj) if col == COL_NAME else None
        if role == FONT:
            return self._probed_font if col == COL_NAME and self.is_probed(obj) else None
        if role == SORT_ROLE:
            return self._sort_key(obj, col)
        if role == FILTER_ROLE:
            return self._filter_text(obj)
        if role == NODE_ROLE:
            return obj
        return None

    @staticmethod
    def _module_text(node, col: int) -> str:
        if col == COL_NAME:
            return node.short_name
        if col == COL_TYPE:
            return node.type_name
        if col == COL_SHAPE:
            return "" if node.output_shape is None else format_shape(node.output_shape)
        if col == COL_PARAMS:
            return format_int(node.total_params)
        if col == COL_TRAINABLE:
            return format_int(node.trainable_params)
        if col == COL_FLOPS:
            return "" if node.flops is None else format_int(node.flops)
        return ""

    @staticmethod
    def _param_text(row: ParamRow, col: int) -> str:
        info = row.info
        if col == COL_NAME:
            return row.short_name
        if col == COL_TYPE:
            return f"param · shared with {info.name}" if row.alias is not None else f"param · {info.dtype}"
        if col == COL_SHAPE:
            return format_shape(info.shape)
        if col == COL_PARAMS:
            return format_int(info.numel)
        if col == COL_TRAINABLE:
            return format_int(info.numel if info.requires_grad else 0)
        return ""

    def _is_frozen(self, obj) -> bool:
        if isinstance(obj, ParamRow):
            return not obj.info.requires_grad
        return obj.total_params > 0 and obj.trainable_params == 0

    def set_comparison(self, changes: dict | None) -> None:
        """Show ``{module: ModuleChange}`` (``||a - b|| / ||a||`` per module) in the Change column; None clears.

        Every module row shows the largest change at or below it
        (:func:`workbench.core.model.diff.subtree_changes`), so a collapsed parent shows its children's.
        """
        self._changes = dict(changes or {})
        self._subtree = subtree_changes(self._changes.values())
        self.refresh_trainable()

    # -- memory ------------------------------------------------------------------
    def set_memory(self, estimate) -> None:
        """Show a :class:`~workbench.core.model.memory.MemoryEstimate` in the Memory column; None clears it.

        Module rows show their ``total_bytes`` (modules the estimate does not
        name, e.g. added since, show nothing), the tooltip the four parts.
        """
        self._memory = estimate
        if self._root is None:
            return
        roles = [DISPLAY, TOOLTIP, SORT_ROLE]
        top = self.createIndex(0, COL_MEMORY, self._root)
        self.dataChanged.emit(top, top, roles)
        parents = self._visible_parents() if self._visible_parents is not None else list(self._touched.values())
        for node in parents:
            rows = len(node.children) + _param_count(node)
            if rows:
                parent = self.createIndex(self._row_of(node), 0, node)
                self.dataChanged.emit(self.index(0, COL_MEMORY, parent), self.index(rows - 1, COL_MEMORY, parent),
                                      roles)

    @property
    def memory(self):
        """The ``MemoryEstimate`` shown in the Memory column, or None."""
        return self._memory

    def memory_of(self, name: str):
        """The ``ModuleMemory`` of module ``name`` in the estimate shown (None: none shown, or no such module)."""
        return None if self._memory is None else self._memory.modules.get(name)

    def _memory_data(self, obj, role: int):
        entry = None if isinstance(obj, ParamRow) else self.memory_of(obj.name)
        if role == SORT_ROLE:
            return -1 if entry is None else entry.total_bytes
        if entry is None:
            return "" if role == DISPLAY else None
        if role == DISPLAY:
            return format_bytes(entry.total_bytes)
        est = self._memory
        states = f"optimizer state ({est.optimizer})"
        return "\n".join([
            f"{format_bytes(entry.total_bytes)} for a training step ({format_int(entry.total_bytes)} bytes):",
            f"parameters {format_bytes(entry.params_bytes)}", f"gradients {format_bytes(entry.grads_bytes)}",
            f"{states} {format_bytes(entry.optimizer_bytes)}",
            f"activations {format_bytes(entry.activations_bytes)}",
            f"batch {est.batch_size}, {est.optimizer}, {est.precision}, on {est.device} (input {est.example})"])

    def _change_data(self, obj, role: int):
        """The Change column: the largest relative change at or below the module (text), details in the tooltip, a colour."""
        if isinstance(obj, ParamRow):
            return None
        below = self._subtree.get(obj.name)
        if below is None:
            return None
        own = self._changes.get(obj.name)
        value = below.value
        if role == DISPLAY:
            if value != value:
                return "shape differs" if below.notes else ""
            return f"{value:.2e}"
        if role == ALIGN:
            return _RIGHT
        if role == TOOLTIP:
            lines = [own.text()] if own is not None else []
            if below.source != obj.name and value == value:
                lines.append(f"largest below: {below.source} {value:.3e}")
            if below.notes and (own is None or not own.note):
                lines.append(f"{below.notes} module(s) below differ in shape or keys")
            return "\n".join(lines) or None
        if role == BACKGROUND and value == value and value > 0:
            # white at 1e-6 and below to red at 1e0 and above (log scale)
            t = min(1.0, max(0.0, (math.log10(value) + 6.0) / 6.0))
            return QBrush(QColor(255, int(255 - 170 * t), int(255 - 200 * t)))
        if role == SORT_ROLE:
            return -1.0 if value != value else value
        return None

    def _tooltip(self, obj, col: int) -> str | None:
        info = obj.info if isinstance(obj, ParamRow) else None
        if col == COL_NAME and info is not None and obj.alias is not None:
            return (f"{obj.path}\nthe same parameter as {info.name} (tied): counted once, there; "
                    "freezing either freezes both")
        if col == COL_NAME:
            name = info.name if info is not None else (obj.name or obj.short_name)
            lines = [name] + ([] if info is not None else [b.text for b in self._badges.get(obj.name, ())])
            if info is None and self._is_frozen(obj) and "BatchNorm" in obj.type_name:
                lines.append("frozen: running statistics fixed while training (eval mode)" if self.bn_stats_fixed
                             else "frozen weights, but running statistics still update while training")
            if self.is_probed(obj):
                lines.append("probed: a forward hook records its output's statistics")
            return "\n".join(line for line in lines if line)
        if col == COL_PARAMS:
            return format_count(info.numel if info is not None else obj.total_params) + " parameters"
        if col == COL_TRAINABLE:
            n = (info.numel if info.requires_grad else 0) if info is not None else obj.trainable_params
            return format_count(n) + " trainable"
        if col == COL_FLOPS and info is None and obj.flops is not None:
            return f"{format_flops(obj.flops)}, 2 per multiply-add: {format_count(macs(obj.flops))} multiply-adds"
        if col == COL_TRAIN:
            return "Tick to train, untick to freeze (requires_grad)"
        return None

    def _sort_key(self, obj, col: int):
        if isinstance(obj, ParamRow):
            info = obj.info
            keys = {COL_PARAMS: info.numel, COL_TRAINABLE: info.numel if info.requires_grad else 0, COL_FLOPS: -1}
            return keys.get(col, obj.row)
        keys = {COL_PARAMS: obj.total_params, COL_TRAINABLE: obj.trainable_params,
                COL_FLOPS: -1 if obj.flops is None else obj.flops, COL_TYPE: obj.type_name}
        return keys.get(col, self._row_of(obj))

    @staticmethod
    def _filter_text(obj) -> str:
        if isinstance(obj, ParamRow):
            return obj.path
        return f"{obj.name} {obj.type_name}"

    # -- badges ----------------------------------------------------------------
    def set_bn_stats_fixed(self, flag: bool) -> None:
        """Whether frozen BatchNorm layers keep their statistics (shown in their tooltips)."""
        self.bn_stats_fixed = bool(flag)

    def set_badges(self, badges: dict[str, list]) -> None:
        """Show probe badges: ``{module qualified name: [core.probe.health.Badge, ...]}``.

        Replaces the previous set; rows that gained or lost a badge repaint.
        """
        changed = set(self._badges) | set(badges)
        self._badges = {name: list(items) for name, items in badges.items() if items}
        for name in changed:
            idx = self.index_for_name(name)
            if idx.isValid():
                self.dataChanged.emit(idx, idx, [DECORATION, TOOLTIP])
        self.badgesChanged.emit()

    def set_probed(self, names) -> None:
        """Mark the modules that have a probe (bold name, a line in the tooltip).

        Parameters
        ----------
        names : iterable of str
            Qualified module names, as the Probes panel reports them.
        """
        names = frozenset(names)
        changed = self._probed ^ names
        self._probed = names
        if self._probed_font is None:
            self._probed_font = QFont()
            self._probed_font.setBold(True)
        for name in changed:
            idx = self.index_for_name(name)
            if idx.isValid():
                self.dataChanged.emit(idx, idx, [FONT, TOOLTIP])

    def is_probed(self, obj) -> bool:
        """True when ``obj`` is a module row whose module is probed."""
        return not isinstance(obj, ParamRow) and obj.name in self._probed

    def badges(self, name: str) -> list:
        """The badges shown on module ``name``."""
        return list(self._badges.get(name, ()))

    def _badge_decoration(self, obj) -> QIcon | None:
        if isinstance(obj, ParamRow):
            return None
        items = self._badges.get(obj.name)
        if not items:
            return None
        kinds = {b.kind for b in items}
        kind = next((k for k in _BADGE_ORDER if k in kinds), items[0].kind)
        if kind not in self._icons:
            self._icons[kind] = _badge_icon(kind)
        return self._icons[kind]

    # -- editing ---------------------------------------------------------------
    def setData(self, index: QModelIndex, value, role: int = Qt.ItemDataRole.EditRole.value) -> bool:  # noqa: D102
        if role != CHECK or not index.isValid() or index.column() != COL_TRAIN:
            return False
        obj = index.internalPointer()
        if not self._has_checkbox(obj):
            return False
        flag = _check_value(value) == Qt.CheckState.Checked.value
        path = obj.path if isinstance(obj, ParamRow) else obj.name
        if self._set_trainable is not None:
            self._set_trainable(path, flag)
        else:
            from workbench.core.model import freezing

            freezing.set_trainable(self._root.module, path, flag)
            self.refresh_trainable()
        return True

    def refresh_trainable(self, changed: Iterable[str] | None = None) -> None:
        """Re-read ``requires_grad`` from the live model and repaint the affected rows.

        Calls ``core.model.tree.refresh_trainable`` once, then emits the root row
        and one ``dataChanged`` per parent range on screen (see
        :meth:`set_visible_parents_provider`; without a provider, per range
        fetched so far), never one per cell. Rows off screen read fresh data
        when they scroll in.

        Parameters
        ----------
        changed : iterable of str, optional
            Unused hint (qualified names that changed); every visible range is repainted.
        """
        if self._root is None:
            return
        core_summary.refresh_trainable(self._root)
        roles = [DISPLAY, CHECK, FOREGROUND, TOOLTIP, SORT_ROLE, BACKGROUND]
        last = len(COLUMNS) - 1
        top = self.createIndex(0, 0, self._root)
        self.dataChanged.emit(top, self.createIndex(0, last, self._root), roles)
        parents = self._visible_parents() if self._visible_parents is not None else list(self._touched.values())
        for node in parents:
            rows = len(node.children) + _param_count(node)
            if rows:
                parent = self.createIndex(self._row_of(node), 0, node)
                self.dataChanged.emit(self.index(0, 0, parent), self.index(rows - 1, last, parent), roles)

    def refresh_all(self) -> None:
        """Repaint every row the view knows (after output shapes / FLOPs were annotated)."""
        self.refresh_trainable()


def node_of(index: QModelIndex | QPersistentModelIndex):
    """The ``ModuleNode`` or ``ParamRow`` behind an index of this model or of a proxy over it."""
    return index.data(NODE_ROLE) if index.isValid() else None
