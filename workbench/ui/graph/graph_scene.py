"""The drawing of a model's graph: :class:`GraphScene` (a ``QGraphicsScene``) and :class:`GraphView`.

The scene draws what core computed (:func:`workbench.core.graph.layout.layout` of
a :meth:`~workbench.core.graph.model_graph.ModelGraph.collapsed` view): one box
per node (a module shown closed, an operation, an input), one path per edge, and
behind the members of each open module a translucent frame with its name. It
computes nothing itself: colours come from :meth:`GraphScene.set_colors`, the
frozen set from :meth:`GraphScene.set_frozen`. Its fills, lines and text follow
the palette (:meth:`GraphScene.set_palette`: light boxes on a light theme, dark
ones on a dark theme).

Level of detail: below :data:`LABEL_SCALE` zoom the labels are hidden (a
10,000-node graph then paints boxes and lines only); edge annotations (the
tensor shapes) show above :data:`SHAPE_SCALE`.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QPainter, QPainterPath, QPalette, QPen
from PySide6.QtWidgets import (QApplication, QGraphicsItem, QGraphicsPathItem, QGraphicsRectItem, QGraphicsScene,
                               QGraphicsSimpleTextItem, QGraphicsView)

from workbench.core.graph.svg import node_label
from workbench.ui.theme import is_dark

__all__ = ["COLORS", "GraphScene", "GraphView", "LABEL_SCALE", "SHAPE_SCALE", "NODE_ROLE"]

#: Zoom (view scale) below which node labels are hidden.
LABEL_SCALE = 0.35
#: Zoom above which edges show the shapes they carry.
SHAPE_SCALE = 0.9
#: ``QGraphicsItem.data`` key holding a box's node name.
NODE_ROLE = 0
#: ``QGraphicsItem.data`` key holding a box's (or a frame's) module path.
MODULE_ROLE = 1
#: ``QGraphicsItem.data`` key: "node" or "frame".
KIND_ROLE = 2
#: ``QGraphicsItem.data`` key of a box: "module", "input" or "op".
OP_ROLE = 3

#: The drawing's colours on a light and on a dark palette: role -> (light, dark). A box's label is black or
#: white by its fill's lightness (an overlay colour too).
COLORS = {
    "module": ("#dbe8f7", "#2b3d55"), "input": ("#d9f2d9", "#27472c"), "op": ("#f2f2f2", "#3a3a3a"),
    "frozen": ("#e3e3e3", "#4d4d4d"),  # frozen boxes are dashed too
    "pen": ("#5a5a5a", "#a6a6a6"), "edge": ("#8a8a8a", "#8c8c8c"), "shape": ("#777777", "#a0a0a0"),
    "frame_title": ("#3c64aa", "#8fb6ee"), "selected": ("#1f6fd1", "#5aa2ff"), "outline": ("#d62728", "#ff5c5c"),
}


class GraphScene(QGraphicsScene):
    """Boxes, edges and frames of one laid-out view of a model's graph.

    Signals
    -------
    nodeClicked(str, str)
        A box was clicked: its node name and module path.
    nodeDoubleClicked(str, str, str)
        A box or a frame was double-clicked: node name (``""`` for a frame), module path, ``"node"``/``"frame"``.
    """

    nodeClicked = Signal(str, str)
    nodeDoubleClicked = Signal(str, str, str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.boxes: dict[str, QGraphicsRectItem] = {}
        self.box_labels: dict[str, QGraphicsSimpleTextItem] = {}
        self.frames: dict[str, QGraphicsRectItem] = {}
        self.labels: list[QGraphicsSimpleTextItem] = []
        self.shape_labels: list[QGraphicsSimpleTextItem] = []
        self.module_of: dict[str, str] = {}
        self._labels_shown = True
        self._shapes_shown = True
        self._frozen: set[str] = set()
        self._colors: dict[str, QColor] = {}
        self._outlined: str | None = None
        self._selected: str | None = None
        self.edges: list[QGraphicsPathItem] = []
        self.frame_titles: list[QGraphicsSimpleTextItem] = []
        self._dark = is_dark(QApplication.palette())

    def color(self, role: str) -> QColor:
        """The colour of ``role`` (a key of :data:`COLORS`) on the palette the scene follows."""
        return QColor(COLORS[role][int(self._dark)])

    def set_palette(self, palette: QPalette) -> None:
        """Follow ``palette`` (the theme changed): every box, line and text drawn again in its colours."""
        dark = is_dark(palette)
        if dark == self._dark:
            return
        self._dark = dark
        pen = self._edge_pen()
        for item in self.edges:
            item.setPen(pen)
        for text in self.shape_labels:
            text.setBrush(QBrush(self.color("shape")))
        for title in self.frame_titles:
            title.setBrush(QBrush(self.color("frame_title")))
        self._restyle_all()

    def _edge_pen(self) -> QPen:
        pen = QPen(self.color("edge"), 1.2)
        pen.setCosmetic(True)
        return pen

    def forget(self) -> None:
        """Another model: nothing selected, nothing outlined, no overlay."""
        self._outlined = self._selected = None
        self._colors = {}

    def show_graph(self, graph, layout, expanded) -> None:
        """Draw ``graph`` (a collapsed view) at ``layout``'s positions; frames around the members of
        each module in ``expanded`` (but the model itself)."""
        self.clear()
        self.boxes, self.frames, self.labels, self.shape_labels, self.module_of = {}, {}, [], [], {}
        self.box_labels = {}  # the selection and the outline stay: they are modules, redrawn where they now are
        self.edges, self.frame_titles = [], []
        self._labels_shown = self._shapes_shown = True  # new items are visible: set_detail hides them again
        font = QFont()
        font.setPointSizeF(9)
        pen = self._edge_pen()
        for (src, dst), line in zip(graph.edges, layout.edges):
            path = QPainterPath(QPointF(*line[0]))
            for x, y in line[1:]:
                path.lineTo(QPointF(x, y))
            item = QGraphicsPathItem(path)
            item.setPen(pen)
            item.setZValue(-1)
            self.addItem(item)
            self.edges.append(item)
            shapes = graph.node(src).shapes
            if shapes:
                text = QGraphicsSimpleTextItem("×".join(map(str, shapes[0])) or "scalar")
                text.setFont(font)
                text.setBrush(QBrush(self.color("shape")))
                mid = line[len(line) // 2] if len(line) > 2 else (line[0] + line[-1]) / 2
                text.setPos(float(mid[0]) + 4, float(mid[1]) - 8)
                text.setZValue(1)
                self.addItem(text)
                self.shape_labels.append(text)
        index = {n: i for i, n in enumerate(layout.names)}
        for node in graph.nodes:
            i = index[node.name]
            (x, y), (w, h) = layout.positions[i], layout.sizes[i]
            box = QGraphicsRectItem(QRectF(float(x - w / 2), float(y - h / 2), float(w), float(h)))
            box.setData(NODE_ROLE, node.name)
            box.setData(MODULE_ROLE, node.module_path)
            box.setData(KIND_ROLE, "node")
            box.setData(OP_ROLE, node.op if node.op in ("module", "input") else "op")
            box.setFlag(QGraphicsItem.GraphicsItemFlag.ItemIsSelectable, True)
            box.setToolTip(_tooltip(node))
            box.setZValue(2)
            self.addItem(box)
            self.boxes[node.name] = box
            self.module_of[node.name] = node.module_path
            label = QGraphicsSimpleTextItem(_label(node), box)
            label.setFont(font)
            r = label.boundingRect()
            label.setPos(float(x - r.width() / 2), float(y - r.height() / 2))
            self.labels.append(label)
            self.box_labels[node.name] = label
        self._draw_frames(graph, layout, expanded, index)
        self._restyle_all()
        self.setSceneRect(QRectF(0, 0, max(layout.width, 1.0), max(layout.height, 1.0)))

    def _draw_frames(self, graph, layout, expanded, index) -> None:
        members: dict[str, list[int]] = {}
        for node in graph.nodes:  # each node's enclosing modules, walked once: O(nodes x depth)
            path = node.module_path
            while path:
                if path in expanded:
                    members.setdefault(path, []).append(index[node.name])
                path = path.rpartition(".")[0]
        deepest = max((p.count(".") for p in members), default=0)
        for path, rows in sorted(members.items(), key=lambda kv: kv[0].count(".")):
            pos, size = layout.positions[rows], layout.sizes[rows]
            pad = 8 + 12 * (deepest - path.count("."))  # an outer frame a little wider: nested titles apart
            lo = (pos - size / 2).min(axis=0) - pad
            hi = (pos + size / 2).max(axis=0) + pad
            top = 14 + 14 * (deepest - path.count("."))
            frame = QGraphicsRectItem(QRectF(float(lo[0]), float(lo[1]) - top, float(hi[0] - lo[0]),
                                             float(hi[1] - lo[1]) + top))
            frame.setData(MODULE_ROLE, path)
            frame.setData(KIND_ROLE, "frame")
            frame.setBrush(QBrush(QColor(90, 140, 210, 22)))
            pen = QPen(QColor(90, 140, 210, 160), 1, Qt.PenStyle.DashLine)
            pen.setCosmetic(True)
            frame.setPen(pen)
            frame.setZValue(-2 + 0.01 * path.count("."))
            frame.setToolTip(f"{path} (double-click to close)")
            title = QGraphicsSimpleTextItem(path, frame)
            title.setBrush(QBrush(self.color("frame_title")))
            title.setPos(float(lo[0]) + 4, float(lo[1]) - top + 1)
            self.labels.append(title)
            self.frame_titles.append(title)
            self.addItem(frame)
            self.frames[path] = frame

    # ------------------------------------------------------------------ state shown
    def set_frozen(self, frozen: set[str]) -> None:
        """Module paths whose every parameter is frozen: their boxes are drawn grey and dashed."""
        self._frozen = set(frozen)
        self._restyle_all()

    def set_colors(self, colors: dict[str, QColor]) -> None:
        """An overlay: each box's fill by its module path (``{}``: the plain fills)."""
        self._colors = dict(colors)
        self._restyle_all()

    def outline(self, module_path: str | None) -> QGraphicsRectItem | None:
        """Outline the box that holds ``module_path`` (the NaN trace's module) in red; the box, or None."""
        self._outlined = module_path
        self._restyle_all()
        return self.box_of(module_path) if module_path is not None else None

    def select_module(self, module_path: str) -> QGraphicsRectItem | None:
        """Mark the box that holds ``module_path``; the box, or None when none is shown."""
        self._selected = module_path
        self._restyle_all()
        return self.box_of(module_path)

    def box_of(self, module_path: str) -> QGraphicsRectItem | None:
        """The box drawn for ``module_path``: its own, or that of the closest closed module holding it, or the
        first operation inside it."""
        best, best_len = None, -1
        for name, path in self.module_of.items():
            box = self.boxes[name]
            if path == module_path:
                return box
            if module_path.startswith(path + ".") and len(path) > best_len and _is_module_box(box):
                best, best_len = box, len(path)
        if best is not None:
            return best
        inside = [self.boxes[n] for n, p in self.module_of.items() if p.startswith(module_path + ".")]
        return inside[0] if inside else None

    def is_frozen(self, module_path: str) -> bool:
        """Whether ``module_path`` is drawn frozen (it, or a module holding it, has every parameter frozen)."""
        return _frozen(module_path, self._frozen)

    @property
    def selected(self) -> str | None:
        """The module path marked selected (None: none)."""
        return self._selected

    @property
    def outlined(self) -> str | None:
        """The module path outlined (the NaN trace's), or None."""
        return self._outlined

    def color_of(self, node_name: str) -> QColor | None:
        """The fill of box ``node_name`` now (None: no such box)."""
        box = self.boxes.get(node_name)
        return None if box is None else box.brush().color()

    def set_detail(self, scale: float) -> None:
        """Labels and shapes shown or hidden for the view's zoom ``scale`` (only when a threshold is crossed)."""
        labels, shapes = scale >= LABEL_SCALE, scale >= SHAPE_SCALE
        if labels != self._labels_shown:
            self._labels_shown = labels
            for item in self.labels:
                item.setVisible(labels)
        if shapes != self._shapes_shown:
            self._shapes_shown = shapes
            for item in self.shape_labels:
                item.setVisible(shapes)

    def _restyle_all(self) -> None:
        outlined = self.box_of(self._outlined) if self._outlined is not None else None
        selected = self.box_of(self._selected) if self._selected is not None else None
        for name, box in self.boxes.items():
            path = self.module_of[name]
            frozen = _frozen(path, self._frozen)
            fill = self._colors.get(path) or self.color("frozen" if frozen else _kind(box))
            box.setBrush(QBrush(fill))
            label = self.box_labels.get(name)
            if label is not None:  # readable on a dark overlay colour
                label.setBrush(QBrush(QColor("white") if fill.lightnessF() < 0.45 else QColor("black")))
            if box is outlined:
                pen = QPen(self.color("outline"), 3)
            elif box is selected:
                pen = QPen(self.color("selected"), 2.5)
            else:
                pen = QPen(self.color("pen"), 1, Qt.PenStyle.DashLine if frozen else Qt.PenStyle.SolidLine)
            pen.setCosmetic(True)
            box.setPen(pen)

    # ------------------------------------------------------------------ mouse
    def mousePressEvent(self, event) -> None:  # noqa: N802 - Qt override
        """A click on a box: ``nodeClicked``."""
        super().mousePressEvent(event)
        item = self._item_at(event.scenePos())
        if item is not None and item.data(KIND_ROLE) == "node":
            self.nodeClicked.emit(item.data(NODE_ROLE), item.data(MODULE_ROLE))

    def mouseDoubleClickEvent(self, event) -> None:  # noqa: N802 - Qt override
        """A double-click on a box or a frame: ``nodeDoubleClicked``."""
        item = self._item_at(event.scenePos())
        if item is not None:
            self.nodeDoubleClicked.emit(item.data(NODE_ROLE) or "", item.data(MODULE_ROLE) or "",
                                        item.data(KIND_ROLE) or "")
        super().mouseDoubleClickEvent(event)

    def _item_at(self, pos: QPointF):
        for item in self.items(pos):
            while item is not None and item.data(KIND_ROLE) is None:
                item = item.parentItem()
            if item is not None:
                return item
        return None


def _is_module_box(box: QGraphicsRectItem) -> bool:
    return box.data(KIND_ROLE) == "node" and box.data(OP_ROLE) == "module"


def _kind(box: QGraphicsRectItem) -> str:
    return box.data(OP_ROLE) or "op"


def _frozen(path: str, frozen: set[str]) -> bool:
    if path in frozen:
        return True
    while "." in path:
        path = path.rsplit(".", 1)[0]
        if path in frozen:
            return True
    return False


def _label(node) -> str:
    title, detail = node_label(node)  # the same two lines as the command line's SVG
    return f"{title}\n{detail}" if detail else title


def _tooltip(node) -> str:
    shapes = ", ".join("×".join(map(str, s)) for s in node.shapes) or "-"
    if node.op == "module":
        return f"module {node.module_path} ({node.module_type}, {node.count} operations)\nout: {shapes}"
    if node.op == "input":
        return f"input {node.name}\n{shapes}"
    where = node.module_path or "(the model)"
    return f"{node.op} in {where}\nout: {shapes}"


class GraphView(QGraphicsView):
    """Pan (drag) and zoom (wheel) over a :class:`GraphScene`; tells the scene its zoom for the level of detail."""

    zoomed = Signal(float)

    def __init__(self, scene: GraphScene, parent=None):
        super().__init__(scene, parent)
        self.setObjectName("graphView")
        self.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        self.setDragMode(QGraphicsView.DragMode.ScrollHandDrag)
        self.setViewportUpdateMode(QGraphicsView.ViewportUpdateMode.MinimalViewportUpdate)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        self.setOptimizationFlag(QGraphicsView.OptimizationFlag.DontSavePainterState, True)

    def scale_factor(self) -> float:
        """The current zoom (1.0: scene units are pixels)."""
        return float(self.transform().m11())

    def wheelEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Zoom about the mouse."""
        factor = 1.25 if event.angleDelta().y() > 0 else 0.8
        self.zoom_by(factor)

    def zoom_by(self, factor: float) -> None:
        """Zoom by ``factor`` (kept within 0.02x to 4x)."""
        now = self.scale_factor()
        factor = float(np.clip(now * factor, 0.02, 4.0) / now)
        self.scale(factor, factor)
        self._tell()

    def fit(self, rect: QRectF, whole_always: bool = False) -> None:
        """Show ``rect`` whole (a margin around it; never above 1.5x); a graph so tall that its labels would
        not show whole is fitted to the width instead (at most 0.8x) and shown from its top, unless
        ``whole_always`` (the Fit button: the whole graph, its labels drawn as its zoom allows)."""
        if rect.isEmpty():
            return
        rect = rect.adjusted(-30, -30, 30, 30)
        view = self.viewport().rect()
        whole = min(view.width() / rect.width(), view.height() / rect.height())
        if whole >= LABEL_SCALE or whole_always:
            k = min(whole, 1.5)
            center = rect.center()
        else:  # a long chain of layers: readable boxes from the top, scroll down for the rest
            k = max(min(view.width() / rect.width(), 0.8), whole)
            center = QPointF(rect.center().x(), rect.top() + view.height() / (2 * k))
        self.resetTransform()
        self.scale(k, k)
        self.centerOn(center)
        self._tell()

    def _tell(self) -> None:
        scene = self.scene()
        if isinstance(scene, GraphScene):
            scene.set_detail(self.scale_factor())
        self.zoomed.emit(self.scale_factor())
