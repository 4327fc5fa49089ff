"""Where the main window opens: a size that fits the screen, and never off every screen.

The first window takes at most :data:`PREFERRED_SIZE` and :data:`SCREEN_FRACTION`
of the available area (the screen less panels and docks) of the screen it opens
on, centred there. A geometry restored from QSettings that lies off every
current screen (a monitor unplugged since) is placed on screen the same way.
"""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize
from PySide6.QtGui import QCursor, QGuiApplication, QScreen
from PySide6.QtWidgets import QStyle, QWidget

__all__ = ["PREFERRED_SIZE", "SCREEN_FRACTION", "fit_rect", "is_on_screen", "place_on_screen"]

#: The size the window opens at on a large screen, pixels.
PREFERRED_SIZE = QSize(1500, 900)
#: The most of the available width and height the first window takes.
SCREEN_FRACTION = 0.9
#: How much of a restored window's title row must lie on some screen to count as on screen, pixels.
MIN_VISIBLE = 64


def fit_rect(available: QRect, preferred: QSize = PREFERRED_SIZE, fraction: float = SCREEN_FRACTION) -> QRect:
    """The rectangle a window takes inside ``available``: ``preferred`` at most, ``fraction`` of it at most, centred.

    Parameters
    ----------
    available : QRect
        The screen's available geometry (``QScreen.availableGeometry()``), pixels.
    preferred : QSize
        Largest size, pixels.
    fraction : float
        Largest share of ``available``'s width and height, in (0, 1].

    Returns
    -------
    QRect
        Inside ``available``, centred in it.
    """
    width = min(preferred.width(), int(available.width() * fraction))
    height = min(preferred.height(), int(available.height() * fraction))
    left = available.x() + (available.width() - width) // 2
    top = available.y() + (available.height() - height) // 2
    return QRect(left, top, width, height)


def _opening_screen(window: QWidget) -> QScreen | None:
    """The screen under the mouse pointer (where a window manager opens a new window), else the window's own."""
    return QGuiApplication.screenAt(QCursor.pos()) or window.screen() or QGuiApplication.primaryScreen()


def place_on_screen(window: QWidget, screen: QScreen | None = None) -> QRect:
    """Size and centre ``window`` by :func:`fit_rect` on ``screen`` (default: the one it opens on).

    The rectangle is the window's frame: the title bar's height (known once shown,
    else the style's title bar height) comes off the client height. A window whose
    minimum size is larger keeps that size, its top-left corner on the screen.

    Returns
    -------
    QRect
        The frame rectangle the window was given.
    """
    screen = screen or _opening_screen(window)
    if screen is None:  # no screen at all: leave the size alone
        return window.geometry()
    available = screen.availableGeometry()
    rect = fit_rect(available)
    frame_extra = window.frameGeometry().height() - window.geometry().height()
    if frame_extra <= 0 and not window.isVisible():  # no frame yet: the style's title bar height
        frame_extra = window.style().pixelMetric(QStyle.PixelMetric.PM_TitleBarHeight)
    window.resize(rect.width(), rect.height() - frame_extra)
    # a window whose docks need more than the rectangle is as large as they need: centre that,
    # its top-left corner (title bar, menus) never above or left of the available area
    least = window.minimumSizeHint().expandedTo(window.minimumSize())  # what its layout will enforce
    width, height = max(window.width(), least.width()), max(window.height(), least.height()) + frame_extra
    left = max(available.left(), available.left() + (available.width() - width) // 2)
    top = max(available.top(), available.top() + (available.height() - height) // 2)
    window.move(left, top)
    return QRect(left, top, width, height)


def is_on_screen(rect: QRect) -> bool:
    """True when the top of ``rect`` (its title row) shows at least :data:`MIN_VISIBLE` pixels on some screen."""
    title_row = QRect(rect.x(), rect.y(), rect.width(), MIN_VISIBLE)
    for screen in QGuiApplication.screens():
        overlap = screen.availableGeometry().intersected(title_row)
        if overlap.width() >= MIN_VISIBLE and overlap.height() >= MIN_VISIBLE // 2:
            return True
    return False
