"""The Model dock's widget: filter box, input-shape field, expand/collapse, the tree view.

The view shows a ``ModelTreeModel`` through a recursive ``QSortFilterProxyModel``
(filter by qualified name or type, sort by params / FLOPs). The context menu only
dispatches to a *controller* (:class:`workbench.ui.edits.ModelEdits`), which owns every edit.
The other columns are sized to their content and the Name column takes the rest, its
names elided at their start; when the tree is narrow, Type and Output shape give the Name column
room (down to their floors) before any number or the Memory column is cut; the header's context menu hides
columns (remembered).
"""

from __future__ import annotations

from typing import Protocol

from PySide6.QtCore import QEvent, QModelIndex, QPoint, QSortFilterProxyModel, Qt, Signal
from PySide6.QtGui import QAction, QFontMetrics
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLineEdit,
    QMenu,
    QStyle,
    QStyledItemDelegate,
    QToolButton,
    QToolTip,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from workbench.core.model.edits import INIT_METHODS, is_head_candidate
from workbench.core.model.lora import is_lora_layer, types_under
from workbench.ui.model.tree_model import (
    COLUMNS,
    COL_CHANGE,
    COL_FLOPS,
    COL_MEMORY,
    COL_NAME,
    COL_PARAMS,
    COL_SHAPE,
    COL_TRAIN,
    COL_TRAINABLE,
    COL_TYPE,
    FILTER_ROLE,
    SORT_ROLE,
    ModelTreeModel,
    ParamRow,
    node_of,
)

#: Default column widths as text samples (the width of the widest sample plus padding): the seven
#: columns fit ~540 px, the Model dock's share of a 1280 px window. A longer Type
#: ("AdaptiveAvgPool2d") elides, larger counts need a wider column: the user can widen any column.
_COLUMN_SAMPLES = {COL_NAME: ("classifier",), COL_TRAIN: ("Train",), COL_TYPE: ("BatchNorm2d",),
                   COL_SHAPE: ("[1, 512, 7, 7]",), COL_PARAMS: ("Params", "2,359,808"),
                   COL_TRAINABLE: ("Trainable", "2,359,808"), COL_FLOPS: ("FLOPs", "23,392,000"),
                   COL_MEMORY: ("Memory", "8.88 MB", "888 kB", "88.8 GB"), COL_CHANGE: ("Change",)}
#: Room for the root's branch and two levels of indentation in the Name column, px.
_NAME_INDENT = 56
#: Cell padding (margins), px.
_CELL_PAD = 8
#: The Output shape column grows to the model's longest shape up to this, px (a 5-D video shape elides).
_MAX_SHAPE_WIDTH = 150
#: The Type column grows to the model's longest type name up to this, px ("LlamaRotaryEmbedding" elides at its
#: end; its tooltip and Details say it whole): the Name column keeps the rest.
_MAX_TYPE_WIDTH = 110
#: Indentation per tree level, px (Qt's default is 20): a depth-5 name ("encoder.layers.0.self_attn.out_proj"'s
#: out_proj) starts 6 levels in, and at 20 px its Name cell on a 1280x800 window had no room left for it.
TREE_INDENT = 12
#: QSettings key: the names of the columns the user hid with the header's column chooser.
HIDDEN_COLUMNS_KEY = "modelTree/hiddenColumns"
#: Columns hidden until the user shows them (header menu): Memory's total is under Start (the fit line), and its
#: ~65 px were the Name column's at 1280x800 (a MiniLM folder's "word_embeddings" read "wo…gs" with it shown).
DEFAULT_HIDDEN = ("Memory",)
#: The least width of the Name column before Type and Output shape give it room (their text elides), px: with
#: the Memory column, resnet18's counts left Name 26 px and pushed Memory 23 px past the edge of a 1280 px window.
NAME_LEAST_WIDTH = 64
#: How narrow Type and Output shape may become to give Name its least width, px (Type gives first).
SHRINK_FLOORS = {COL_TYPE: 72, COL_SHAPE: 84}
#: Columns the header's context menu can hide (Name always shows; Change shows while a comparison is set).
CHOOSABLE_COLUMNS = (COL_TRAIN, COL_TYPE, COL_SHAPE, COL_PARAMS, COL_TRAINABLE, COL_FLOPS, COL_MEMORY)


def _text_width(metrics: QFontMetrics, text: str) -> int:
    return metrics.horizontalAdvance(text) + _CELL_PAD


def default_column_widths(metrics: QFontMetrics) -> dict[int, int]:
    """The first width of each column of the model tree, px, for the font of ``metrics``.

    Parameters
    ----------
    metrics : QFontMetrics
        The tree's font metrics.

    Returns
    -------
    dict of int to int
        Column -> width.
    """
    widths = {col: max(metrics.horizontalAdvance(text) for text in samples) + _CELL_PAD
              for col, samples in _COLUMN_SAMPLES.items()}
    widths[COL_NAME] += _NAME_INDENT
    return widths


def _ancestors(node) -> list:
    """``node``'s parents up to the root."""
    out = []
    while node.parent is not None:
        node = node.parent
        out.append(node)
    return out


class _ElideRight(QStyledItemDelegate):
    """Cells of the columns other than Name elide at their end (a count keeps its leading digits, a type its start)."""

    def initStyleOption(self, option, index) -> None:  # noqa: N802 - Qt override
        super().initStyleOption(option, index)
        option.textElideMode = Qt.TextElideMode.ElideRight


class _TrainCells(_ElideRight):
    """The Train column: its checkboxes greyed and deaf, the reason as their tooltip, while read-only
    (:meth:`ModelTreeWidget.set_read_only`: another window steers the attached run)."""

    #: events that would tick a checkbox (a click, a double click, Space / Select)
    _TICKS = (QEvent.Type.MouseButtonPress, QEvent.Type.MouseButtonRelease, QEvent.Type.MouseButtonDblClick,
              QEvent.Type.KeyPress)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.reason = ""

    def initStyleOption(self, option, index) -> None:  # noqa: N802 - Qt override
        super().initStyleOption(option, index)
        if self.reason:
            option.state &= ~QStyle.StateFlag.State_Enabled

    def editorEvent(self, event, model, option, index) -> bool:  # noqa: N802 - Qt override
        if self.reason and event.type() in self._TICKS:
            return True  # taken here: the check state does not change
        return super().editorEvent(event, model, option, index)

    def helpEvent(self, event, view, option, index) -> bool:  # noqa: N802 - Qt override
        if self.reason and event.type() == QEvent.Type.ToolTip:
            QToolTip.showText(event.globalPos(), self.reason, view)
            return True
        return super().helpEvent(event, view, option, index)


class TreeController(Protocol):
    """What the context menu asks of its owner (:class:`workbench.ui.edits.ModelEdits` implements it)."""

    keep_bn_stats_fixed: bool

    def set_trainable(self, path_or_names, flag: bool) -> None: ...  # noqa: D102
    def freeze_all_except(self, path: str) -> None: ...  # noqa: D102
    def freeze_before(self, path: str) -> None: ...  # noqa: D102
    def freeze_first_blocks(self, n: int | None = None) -> bool: ...  # noqa: D102
    def reinitialize(self, path: str, method: str) -> None: ...  # noqa: D102
    def replace_head(self, path: str, num_outputs: int | None = None) -> None: ...  # noqa: D102
    def add_lora(self, paths) -> bool: ...  # noqa: D102
    def set_keep_bn_stats_fixed(self, flag: bool) -> None: ...  # noqa: D102
    def is_probed(self, name: str) -> bool: ...  # noqa: D102
    def toggle_probe(self, name: str) -> None: ...  # noqa: D102


class TreeFilterProxy(QSortFilterProxyModel):
    """Recursive, case-insensitive filter on "qualified name + type"; numeric sort keys."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setRecursiveFilteringEnabled(True)
        self.setFilterRole(FILTER_ROLE)
        self.setSortRole(SORT_ROLE)
        self.setFilterKeyColumn(COL_NAME)
        self.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)


class ModelTreeWidget(QWidget):
    """Filter box + input-shape field + expand/collapse buttons over the module tree view.

    Parameters
    ----------
    controller : TreeController
        Receives the context menu's edits.
    parent : QWidget, optional

    Signals
    -------
    currentNodeChanged(object)
        The selected ``ModuleNode`` / ``ParamRow`` (or None).
    inputShapeEntered(str)
        The text of the input-shape field, when the user presses Enter.
    moduleExpanded(str, bool)
        A module's row was expanded (True) or collapsed (False): its qualified name (``""``: the model).
    """

    currentNodeChanged = Signal(object)
    inputShapeEntered = Signal(str)
    moduleExpanded = Signal(str, bool)

    def __init__(self, controller: TreeController, parent=None):
        super().__init__(parent)
        self._controller = controller
        self.filter_edit = QLineEdit(objectName="filterEdit", placeholderText="Filter: name or type (layer4, Conv2d)")
        self.filter_edit.setClearButtonEnabled(True)
        self.input_shape_edit = QLineEdit(objectName="inputShapeEdit", placeholderText="Input shape, e.g. 1,3,224,224")
        self.input_shape_edit.setToolTip("Input shape (N, C, H, W), or (N, L) token ids for a model that starts "
                                         "with an embedding: fills Output shape and FLOPs. Press Enter.")
        self.proxy = TreeFilterProxy(self)
        self.view = self._make_view()
        self._build_layout()
        self.filter_edit.textChanged.connect(self._on_filter_changed)
        self.input_shape_edit.returnPressed.connect(self._on_input_shape_entered)
        self.view.customContextMenuRequested.connect(self._on_context_menu_requested)
        self.view.expanded.connect(lambda idx: self._on_expanded(idx, True))
        self.view.collapsed.connect(lambda idx: self._on_expanded(idx, False))

    def _make_view(self) -> QTreeView:
        view = QTreeView(objectName="modelTree")
        view.setModel(self.proxy)
        view.setUniformRowHeights(True)
        view.setAlternatingRowColors(True)
        view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        header = view.header()
        view.setSortingEnabled(True)
        view.sortByColumn(-1, Qt.SortOrder.AscendingOrder)  # registration order until a header is clicked
        header.setStretchLastSection(False)
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        # names elide in their middle ("word_…dings", "posit…dings"): the start that tells siblings apart and the
        # end with the index both stay (at the start, word_ / position_ / token_type_embeddings all read
        # "…mbeddings"); the Name column takes the width the other columns (sized to their content) leave,
        # so the last one (FLOPs, Change) is never cut
        view.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        view.setIndentation(TREE_INDENT)
        self._elide_right = _ElideRight(view)
        self._train_cells = _TrainCells(view)
        for col in range(len(COLUMNS)):
            if col != COL_NAME:
                view.setItemDelegateForColumn(col, self._train_cells if col == COL_TRAIN else self._elide_right)
        header.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        header.customContextMenuRequested.connect(self._on_header_menu_requested)
        self._wanted: dict[int, int] = {}  # the widths Type and Output shape would have with room (fit or dragged)
        self._sharing = False
        self._type_fit = 0  # the Type width fit_number_columns set (capped), and the model's widest type name's
        self._type_full = 0
        self._name_need = 0  # the Name column's width for the deepest, longest name of the model, px
        header.sectionResized.connect(self._on_section_resized)
        view.viewport().installEventFilter(self)
        return view

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 - Qt override
        """A new viewport width shares the room again (:meth:`share_room`)."""
        if event.type() == QEvent.Type.Resize and obj is self.view.viewport():
            self.share_room()
        return False

    def _on_section_resized(self, col: int, _old: int, new: int) -> None:
        if not self._sharing and col in SHRINK_FLOORS:
            self._wanted[col] = new

    def share_room(self) -> None:
        """Give the Name column :data:`NAME_LEAST_WIDTH`: Type, then Output shape, shrink (to
        :data:`SHRINK_FLOORS`) when the other columns would leave it less, and grow back when there is room.

        Every other column keeps its width, so no number is cut; the Name column stretches into what is left.
        Room the Name column does not need for the model's names (:meth:`fit_number_columns`) lets a Type
        column left at its fit width grow past :data:`_MAX_TYPE_WIDTH`, up to the widest type name.
        """
        view, header = self.view, self.view.header()
        shown = [c for c in range(header.count()) if c != COL_NAME and not view.isColumnHidden(c)]
        fixed = sum(header.sectionSize(c) for c in shown if c not in SHRINK_FLOORS)
        want = {c: self._wanted.get(c, header.sectionSize(c)) for c in SHRINK_FLOORS if c in shown}
        short = fixed + sum(want.values()) + NAME_LEAST_WIDTH - view.viewport().width()
        self._sharing = True
        try:
            for col, width in want.items():
                give = max(0, min(short, width - SHRINK_FLOORS[col]))
                short -= give
                if header.sectionSize(col) != width - give:
                    header.resizeSection(col, width - give)
            self._grow_type(shown)
        finally:
            self._sharing = False

    def _grow_type(self, shown: list[int]) -> None:
        """A Type column at its fit width (not dragged) takes the Name column's spare room, up to the widest type."""
        header = self.view.header()
        if COL_TYPE not in shown or self._wanted.get(COL_TYPE) != self._type_fit:
            return
        width = header.sectionSize(COL_TYPE)
        spare = self.view.viewport().width() - sum(header.sectionSize(c) for c in shown) \
            - max(NAME_LEAST_WIDTH, self._name_need)
        grow = min(spare, self._type_full - width)
        if grow > 0:
            header.resizeSection(COL_TYPE, width + grow)

    # -- the columns -------------------------------------------------------------
    def column_menu(self) -> QMenu:
        """The header's context menu (build, not show): one checkable entry per column that can be hidden.

        A choice is remembered (QSettings :data:`HIDDEN_COLUMNS_KEY`) and applies to every model opened later.
        """
        menu = QMenu(self)
        menu.setObjectName("treeColumnMenu")
        for col in CHOOSABLE_COLUMNS:
            action = menu.addAction(COLUMNS[col])
            action.setCheckable(True)
            action.setChecked(not self.view.isColumnHidden(col))
            action.toggled.connect(lambda shown, c=col: self.set_column_shown(c, shown))
        return menu

    def _on_header_menu_requested(self, pos) -> None:
        menu = self.column_menu()
        menu.exec(self.view.header().mapToGlobal(pos))
        menu.deleteLater()

    def set_column_shown(self, col: int, shown: bool) -> None:
        """Show or hide column ``col`` (one of :data:`CHOOSABLE_COLUMNS`) and remember the choice."""
        if col not in CHOOSABLE_COLUMNS:
            raise ValueError(f"column {col} cannot be hidden (choose one of {CHOOSABLE_COLUMNS})")
        self.view.setColumnHidden(col, not shown)
        self.share_room()
        hidden = [COLUMNS[c] for c in CHOOSABLE_COLUMNS if self.view.isColumnHidden(c)]
        from workbench.ui.qsettings import make_settings

        make_settings().setValue(HIDDEN_COLUMNS_KEY, hidden or "")

    def _restore_hidden_columns(self) -> None:
        from workbench.ui.qsettings import make_settings

        value = make_settings().value(HIDDEN_COLUMNS_KEY, list(DEFAULT_HIDDEN))
        names = {value} if isinstance(value, str) else set(value or ())
        for col in CHOOSABLE_COLUMNS:
            self.view.setColumnHidden(col, COLUMNS[col] in names)

    def _apply_column_widths(self) -> None:
        header = self.view.header()
        for col, width in default_column_widths(self.view.fontMetrics()).items():
            header.resizeSection(col, width)
        header.setSectionResizeMode(COL_NAME, QHeaderView.ResizeMode.Stretch)  # the room the others leave

    def fit_number_columns(self) -> bool:
        """Size Params, Trainable and FLOPs to the shown model's totals (the widest numbers), Output shape to its
        longest shape (up to :data:`_MAX_SHAPE_WIDTH`) and Type to its longest type name (up to
        :data:`_MAX_TYPE_WIDTH`), each at least as wide as its header; Name takes the width left.

        The first widths fit a small model; resnet18's "11,689,512" parameters and
        "3,628,146,688" FLOPs were elided, and fixed widths left a deep name no room. Returns whether a column grew.
        """
        from workbench.core.formatting import format_int, format_shape

        root = getattr(self.proxy.sourceModel(), "root", None)
        if root is None:
            return False
        metrics, header, grew = self.view.fontMetrics(), self.view.header(), False
        nodes = list(root.walk())
        shapes = {format_shape(n.output_shape) for n in nodes if isinstance(n.output_shape, (tuple, list))}
        widest_shape = max((metrics.horizontalAdvance(t) for t in shapes), default=0)
        widest_type = max((metrics.horizontalAdvance(t) for t in {n.type_name for n in nodes}), default=0)
        # a name starts past a margin, the root's branch and one indentation a level; a module's parameter rows are a
        # level deeper than it (counted with the module's own, longer, name)
        self._name_need = max((TREE_INDENT * (n.depth + 2) + metrics.horizontalAdvance(n.short_name or n.name or "")
                               for n in nodes), default=0) + 2 * _CELL_PAD
        self._type_full = widest_type + _CELL_PAD
        for col, need in ((COL_PARAMS, _text_width(metrics, format_int(root.total_params))),
                          (COL_TRAINABLE, _text_width(metrics, format_int(root.trainable_params))),
                          (COL_FLOPS, _text_width(metrics, format_int(root.flops)) if root.flops is not None else 0),
                          (COL_SHAPE, min(widest_shape + _CELL_PAD, _MAX_SHAPE_WIDTH)),
                          (COL_TYPE, min(widest_type + _CELL_PAD, _MAX_TYPE_WIDTH))):
            need = max(need, _text_width(metrics, COLUMNS[col]))
            if col == COL_TYPE:
                self._type_fit = need
            has = self._wanted.get(col, header.sectionSize(col))
            if has != need or header.sectionSize(col) != need:
                grew = grew or has < need
                header.resizeSection(col, need)
            if col in SHRINK_FLOORS:  # also when its width was already right (no resize, so no signal)
                self._wanted[col] = need
        self.share_room()
        return grew

    def columns_width(self) -> int:
        """The width this widget needs to show every visible column whole, with room for a vertical scroll bar, px.

        The window gives the Model dock this width by default (``MainWindow``'s
        default dock sizes), so that no column (Name ... FLOPs) is cut on a laptop.
        """
        view = self.view
        header = view.header()
        name = default_column_widths(view.fontMetrics())[COL_NAME]  # Name stretches: what it needs, not what it has
        columns = name + sum(self._wanted.get(c, header.sectionSize(c)) for c in range(header.count())
                             if c != COL_NAME and not view.isColumnHidden(c))
        scroll_bar = view.style().pixelMetric(view.style().PixelMetric.PM_ScrollBarExtent, None, view)
        margins = self.layout().contentsMargins()
        return columns + scroll_bar + 2 * view.frameWidth() + margins.left() + margins.right()

    def _build_layout(self) -> None:
        expand = QToolButton(text="Expand all", toolTip="Expand every row")
        collapse = QToolButton(text="Collapse", toolTip="Collapse to the top level")
        expand.clicked.connect(self.expand_all)
        collapse.clicked.connect(self.collapse_all)
        bar = QHBoxLayout()
        bar.setContentsMargins(0, 0, 0, 0)
        bar.addWidget(self.filter_edit, 3)
        bar.addWidget(self.input_shape_edit, 2)
        bar.addWidget(expand)
        bar.addWidget(collapse)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(bar)
        layout.addWidget(self.view)

    # -- model -----------------------------------------------------------------
    def set_model(self, model: ModelTreeModel) -> None:
        """Show ``model`` (once; later models replace their root with ``set_root``)."""
        self.proxy.setSourceModel(model)
        model.set_visible_parents_provider(self.visible_source_parents)
        self._apply_column_widths()
        self.view.setColumnHidden(COL_CHANGE, True)  # shown while a comparison is set (show_change_column)
        self._restore_hidden_columns()
        self.view.selectionModel().currentChanged.connect(self._on_current_changed)
        self.reset_view()

    def show_change_column(self, shown: bool) -> None:
        """Show or hide the Change column ("Compare with…")."""
        self.view.setColumnHidden(COL_CHANGE, not shown)
        self.share_room()

    def reset_view(self) -> None:
        """Expand the root row so the top-level modules show."""
        self.view.expand(self.proxy.index(0, 0))

    @property
    def source_model(self) -> ModelTreeModel:
        """The ``ModelTreeModel`` behind the proxy."""
        return self.proxy.sourceModel()

    def expand_all(self) -> None:
        """Expand every row (can take a moment on very large models)."""
        self.view.expandAll()

    def collapse_all(self) -> None:
        """Collapse to the root and its direct children."""
        self.view.collapseAll()
        self.reset_view()

    def expand_to_depth(self, depth: int) -> None:
        """Expand the first ``depth`` levels below the root row."""
        self.view.expandToDepth(depth)

    def select_name(self, name: str) -> bool:
        """Select and scroll to the row with qualified ``name``; False if not shown."""
        src = self.source_model.index_for_name(name)
        idx = self.proxy.mapFromSource(src)
        if not idx.isValid():
            return False
        self.view.setCurrentIndex(idx)
        self.view.scrollTo(idx)
        return True

    def set_expanded(self, name: str, flag: bool) -> bool:
        """Expand (``flag``) or collapse the row of module ``name`` (its parents expand with it); False if not shown."""
        idx = self.proxy.mapFromSource(self.source_model.index_for_name(name))
        if not idx.isValid():
            return False
        if flag:
            parent = idx.parent()
            while parent.isValid():
                self.view.expand(parent)
                parent = parent.parent()
        if self.view.isExpanded(idx) != bool(flag):
            self.view.setExpanded(idx, bool(flag))
        return True

    def is_expanded(self, name: str) -> bool:
        """Whether the row of module ``name`` is shown expanded."""
        idx = self.proxy.mapFromSource(self.source_model.index_for_name(name))
        return idx.isValid() and self.view.isExpanded(idx)

    def _on_expanded(self, idx, flag: bool) -> None:
        node = node_of(idx)
        name = getattr(node, "name", None)
        if isinstance(name, str) and not isinstance(node, ParamRow):
            self.moduleExpanded.emit(name, flag)

    def visible_source_parents(self) -> list:
        """The ``ModuleNode`` parents of the rows on screen (for cheap repaints)."""
        view = self.view
        bottom = view.viewport().rect().bottom()
        idx = view.indexAt(QPoint(1, 1))
        parents: dict[int, object] = {}
        while idx.isValid() and view.visualRect(idx).top() <= bottom:
            parent = node_of(idx.parent())
            if parent is not None:
                parents[id(parent)] = parent
            idx = view.indexBelow(idx)
        return list(parents.values())

    def current_node(self):
        """The selected ``ModuleNode`` / ``ParamRow``, or None."""
        return node_of(self.view.currentIndex())

    # -- handlers --------------------------------------------------------------
    def _on_filter_changed(self, text: str) -> None:
        current = self.current_node()
        self.proxy.setFilterFixedString(text.strip())
        if text.strip():
            self.view.expandAll()
            return
        self.view.collapseAll()
        self.reset_view()
        if current is not None:
            name = current.path if isinstance(current, ParamRow) else current.name
            self.select_name(name)

    def _on_input_shape_entered(self) -> None:
        self.inputShapeEntered.emit(self.input_shape_edit.text())

    def _on_current_changed(self, current: QModelIndex, _previous: QModelIndex) -> None:
        self.currentNodeChanged.emit(node_of(current))

    def _on_context_menu_requested(self, pos) -> None:
        menu = self.context_menu(self.view.indexAt(pos))
        if menu is not None:
            menu.exec(self.view.viewport().mapToGlobal(pos))
            menu.deleteLater()

    # -- read-only: another window steers the run ------------------------------------
    def set_read_only(self, reason: str) -> None:
        """Grey the Train checkboxes and the context menu's freezes, ``reason`` as their tooltip (``""``: editable
        again). The training panel's ``steeringChanged`` drives it: an attached run whose steering another window
        took over."""
        self._train_cells.reason = str(reason or "")
        self.view.viewport().update()

    def read_only_reason(self) -> str:
        """Why the Train checkboxes are read-only (``""``: they are not)."""
        return self._train_cells.reason

    def _grey_freezes(self, menu: QMenu) -> QMenu:
        reason = self._train_cells.reason
        if reason:
            menu.setToolTipsVisible(True)
            for action in menu.actions():
                if action.text().startswith("Freeze") or action.text() == "Unfreeze":
                    action.setEnabled(False)
                    action.setToolTip(reason)
        return menu

    # -- context menu ------------------------------------------------------------
    def context_menu(self, index: QModelIndex) -> QMenu | None:
        """Build (not show) the context menu for a row of the view; None on empty space. While read-only
        (:meth:`set_read_only`) its freezes are greyed, the reason as their tooltip."""
        obj = node_of(index)
        if obj is None:
            return None
        menu = QMenu(self)
        if isinstance(obj, ParamRow):
            self._add_freeze_actions(menu, obj.path, obj.info.requires_grad)
            return self._grey_freezes(menu)
        self._add_freeze_actions(menu, obj.name, obj.trainable_params > 0)
        menu.addAction("Freeze all except this", lambda: self._controller.freeze_all_except(obj.name))
        menu.addAction("Freeze everything before this", lambda: self._controller.freeze_before(obj.name))
        first = menu.addAction("Freeze embeddings and the first N blocks…",
                               lambda: self._controller.freeze_first_blocks())
        first.setObjectName("freezeFirstBlocksAction")
        bn = menu.addAction("Keep BatchNorm statistics fixed when frozen")
        bn.setCheckable(True)
        bn.setChecked(bool(self._controller.keep_bn_stats_fixed))
        bn.toggled.connect(self._controller.set_keep_bn_stats_fixed)
        menu.addSeparator()
        self._add_reinit_menu(menu, obj)
        head = menu.addAction("Replace head…", lambda: self._controller.replace_head(obj.name))
        head.setEnabled(bool(obj.name) and is_head_candidate(obj.module))
        self._add_lora_action(menu, obj)
        self._add_probe_action(menu, obj.name)
        return self._grey_freezes(menu)

    def _add_freeze_actions(self, menu: QMenu, path: str, trainable: bool) -> None:
        menu.addAction("Freeze", lambda: self._controller.set_trainable(path, False)).setEnabled(trainable)
        menu.addAction("Unfreeze", lambda: self._controller.set_trainable(path, True))

    def _add_reinit_menu(self, menu: QMenu, node) -> None:
        sub = menu.addMenu("Re-initialize")
        sub.setEnabled(node.total_params > 0)
        for method in INIT_METHODS:
            label = f"{method}()" + ("…" if method == "constant_" else "")
            sub.addAction(label, lambda m=method: self._controller.reinitialize(node.name, m))

    def _add_lora_action(self, menu: QMenu, node) -> None:
        """"Add LoRA adapters…" (objectName ``addLoraAction``): enabled where a Linear / Conv2d
        without adapters is at or below the row."""
        action = menu.addAction("Add LoRA adapters…", lambda: self._controller.add_lora(node.name))
        action.setObjectName("addLoraAction")
        action.setToolTip("Freeze the weights and train low-rank adapters (LoRA, peft)")
        action.setEnabled(node.module is not None and bool(types_under(node.module, ""))
                          and not any(is_lora_layer(n.module) for n in _ancestors(node)))

    def _add_probe_action(self, menu: QMenu, name: str) -> None:
        action = QAction("Probe", menu, checkable=True)
        action.setChecked(self._controller.is_probed(name))
        action.triggered.connect(lambda _checked=False: self._controller.toggle_probe(name))
        menu.addAction(action)
