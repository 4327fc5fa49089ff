"""The one writer of a graph's image: an SVG drawing saved as ``.svg``, or rendered to ``.png``; atomically.

Both the Graph tab's Export (its scene as SVG, :func:`scene_svg`) and
``workbench graph --out OUT.svg|.png`` (core's drawing,
:func:`workbench.core.graph.svg.to_svg`) write through
:func:`write_graph_image`: the bytes go to a temporary file in the same folder
and replace the destination (:mod:`workbench.core.files`), so a failed write
leaves the previous file, or none, never a partial one.

Rendering a PNG needs Qt (fonts need an application): one is started,
offscreen when there is no display, if the process has none.
"""

from __future__ import annotations

import os
from pathlib import Path

from workbench.core.files import atomic_write_bytes, atomic_write_text

__all__ = ["write_graph_image", "svg_to_png", "scene_svg", "IMAGE_SUFFIXES", "PNG_MAX_SIDE"]

#: What :func:`write_graph_image` writes, by suffix.
IMAGE_SUFFIXES = (".svg", ".png")
#: Longest side of a PNG, pixels: a larger drawing is scaled down to fit (QImage's limits, file size).
PNG_MAX_SIDE = 16384
_QT_APP = None


def write_graph_image(path: str | Path, svg: str, *, scale: float = 1.0, max_side: int = PNG_MAX_SIDE) -> Path:
    """Write the SVG drawing ``svg`` to ``path`` atomically: as it is (``.svg``) or rendered (``.png``).

    Parameters
    ----------
    path : str or Path
        The destination; its suffix (``.svg`` or ``.png``, any case) says what to write.
    svg : str
        An SVG document.
    scale : float
        PNG pixels per SVG unit (default 1).
    max_side : int
        The PNG's longest side at most, pixels: ``scale`` is lowered to fit.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ValueError
        Another suffix (nothing is written), or a drawing Qt cannot render or encode.
    OSError
        The file cannot be written; the previous file, if any, is unchanged and no temporary file is left.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".svg":
        return atomic_write_text(path, svg)
    if suffix == ".png":
        return atomic_write_bytes(path, svg_to_png(svg, scale=scale, max_side=max_side))
    raise ValueError(f"{path}: export as .svg or .png")


def _application() -> None:
    """Make sure the process has a Qt application (text needs fonts, fonts an application)."""
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QCoreApplication
    from PySide6.QtWidgets import QApplication

    global _QT_APP
    if QCoreApplication.instance() is None:  # a full QApplication, so that a window can still be made later
        _QT_APP = QApplication(["workbench-graph"])


def svg_to_png(svg: str, *, scale: float = 1.0, max_side: int = PNG_MAX_SIDE) -> bytes:
    """PNG bytes of an SVG document, rendered by Qt's SVG module on white (offscreen; no window is shown).

    Parameters
    ----------
    svg : str
        An SVG document; its width and height (times ``scale``) give the image's size in pixels.
    scale : float
        Pixels per SVG unit.
    max_side : int
        The longest side at most, pixels.

    Returns
    -------
    bytes
        A PNG file's bytes.

    Raises
    ------
    ValueError
        Qt cannot read the SVG, or cannot encode the image.
    """
    _application()
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice
    from PySide6.QtGui import QColor, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(QByteArray(svg.encode("utf-8")))
    if not renderer.isValid():
        raise ValueError("the SVG drawing of the graph could not be rendered")
    size = renderer.defaultSize()
    k = min(scale, max_side / max(size.width(), size.height(), 1))
    image = QImage(max(1, int(size.width() * k)), max(1, int(size.height() * k)), QImage.Format.Format_ARGB32)
    image.fill(QColor("white"))
    painter = QPainter(image)
    try:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter)
    finally:
        painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if not image.save(buffer, "PNG"):
        raise ValueError("the graph's image could not be encoded as PNG")
    buffer.close()
    return bytes(data.data())


def scene_svg(scene, title: str = "Workbench model graph", margin: float = 20.0) -> str:
    """The drawing of a ``QGraphicsScene`` (its items' bounds plus ``margin``) as an SVG document.

    Parameters
    ----------
    scene : QGraphicsScene
    title : str
        The document's title.
    margin : float
        Space around the items, scene units.

    Returns
    -------
    str
        The SVG text; one scene unit is one SVG unit.
    """
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QRectF
    from PySide6.QtGui import QPainter
    from PySide6.QtSvg import QSvgGenerator

    rect = scene.itemsBoundingRect().adjusted(-margin, -margin, margin, margin)
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    gen = QSvgGenerator()
    gen.setOutputDevice(buffer)
    gen.setSize(rect.size().toSize())
    gen.setViewBox(QRectF(0, 0, rect.width(), rect.height()))
    gen.setTitle(title)
    painter = QPainter(gen)
    try:
        scene.render(painter, QRectF(0, 0, rect.width(), rect.height()), rect)
    finally:
        painter.end()
    buffer.close()
    return bytes(data.data()).decode("utf-8")
