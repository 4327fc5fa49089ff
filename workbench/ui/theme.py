"""View > Theme: System, Light or Dark, for the widgets and the pyqtgraph plots alike.

Light and Dark set the Fusion style and a :class:`QPalette` on the application;
System puts back the style and palette the application started with. The plots
follow the palette one way: :func:`apply_plot_colors` sets pyqtgraph's
``background`` / ``foreground`` options (plots created later take them) and
restyles every plot already under a widget (background, axes, titles, legends).
Plot code therefore creates ``pg.PlotWidget()`` without a background of its own.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QObject, QSettings
from PySide6.QtGui import QAction, QActionGroup, QColor, QPalette
from PySide6.QtWidgets import QApplication, QMenu, QProxyStyle, QStyle, QStyleFactory, QWidget

__all__ = ["THEMES", "THEME_KEY", "ThemeChooser", "apply_plot_colors", "apply_theme", "is_dark",
           "plot_colors", "remembered_theme", "theme_palette"]

#: The choices, as stored in QSettings and shown in View > Theme.
THEMES = {"system": "&System", "light": "&Light", "dark": "&Dark"}
#: QSettings key of the chosen theme.
THEME_KEY = "view/theme"

_R = QPalette.ColorRole
#: Colors of the two palettes: role -> (light, dark).
_COLORS = {
    _R.Window: ("#efefef", "#2d2d2d"),
    _R.WindowText: ("#000000", "#e8e8e8"),
    _R.Base: ("#ffffff", "#1e1e1e"),
    _R.AlternateBase: ("#f5f5f5", "#262626"),
    _R.ToolTipBase: ("#ffffdc", "#3a3a3a"),
    _R.ToolTipText: ("#000000", "#e8e8e8"),
    _R.PlaceholderText: ("#7f7f7f", "#8a8a8a"),
    _R.Text: ("#000000", "#e8e8e8"),
    _R.Button: ("#efefef", "#353535"),
    _R.ButtonText: ("#000000", "#e8e8e8"),
    _R.BrightText: ("#ff0000", "#ff5555"),
    _R.Light: ("#ffffff", "#4a4a4a"),
    _R.Midlight: ("#cacaca", "#3e3e3e"),
    _R.Mid: ("#b8b8b8", "#2a2a2a"),
    _R.Dark: ("#9f9f9f", "#1a1a1a"),
    _R.Shadow: ("#767676", "#0a0a0a"),
    _R.Highlight: ("#308cc6", "#2f7fd1"),
    _R.HighlightedText: ("#ffffff", "#ffffff"),
    _R.Link: ("#0000ff", "#6fb3ff"),
    _R.LinkVisited: ("#ff00ff", "#c58af9"),
}
#: Disabled text, both palettes: (light, dark).
_DISABLED = ("#8c8c8c", "#6e6e6e")

#: (style name, palette) the application had before the first theme was applied.
_system: tuple[str, QPalette] | None = None
_current: str | None = None


def theme_palette(name: str) -> QPalette:
    """The palette of theme ``"light"`` or ``"dark"``.

    Raises
    ------
    ValueError
        For any other name (System has no palette of its own).
    """
    if name not in ("light", "dark"):
        raise ValueError(f"no palette for theme {name!r}")
    col = 0 if name == "light" else 1
    palette = QPalette()
    for role, colors in _COLORS.items():
        palette.setColor(role, QColor(colors[col]))
    disabled = QColor(_DISABLED[col])
    for role in (_R.Text, _R.WindowText, _R.ButtonText, _R.HighlightedText):
        palette.setColor(QPalette.ColorGroup.Disabled, role, disabled)
    palette.setColor(QPalette.ColorGroup.Disabled, _R.Highlight, QColor(_COLORS[_R.Mid][col]))
    return palette


def apply_theme(name: str) -> None:
    """Set the application's style and palette for theme ``name``, and the plots' default colors.

    Parameters
    ----------
    name : str
        ``"system"``, ``"light"`` or ``"dark"``; anything else counts as ``"system"``.

    Plots that exist already are restyled by :func:`apply_plot_colors` (the
    caller names the widget they live under).
    """
    global _system, _current
    app = QApplication.instance()
    name = name if name in THEMES else "system"
    if _system is None:
        _system = (app.style().name(), QPalette(app.palette()))
    if name != _current:
        if name == "system":
            if _current is not None:  # a theme was set: put back what the application started with
                _set_style(app, _system[0])
                app.setPalette(_system[1])
        else:
            _set_style(app, name)
            app.setPalette(theme_palette(name))
        _current = name
    background, foreground = plot_colors(app.palette())
    pg.setConfigOptions(background=background, foreground=foreground)


def _set_style(app: QApplication, name: str) -> None:
    """Fusion (``"light"``), :class:`DarkFusion` (``"dark"``) or a style by name, unless it is the one in use.

    A new style re-polishes every widget, so an unchanged one is kept.
    """
    style = app.style()
    if name == "dark":
        if not isinstance(style, DarkFusion):
            app.setStyle(DarkFusion())
        return
    name = "Fusion" if name == "light" else name
    if isinstance(style, DarkFusion) or style.name().lower() != name.lower():
        app.setStyle(name)


class DarkFusion(QProxyStyle):
    """Fusion whose check box outlines show on a dark palette.

    Fusion draws a check box's outline from the Window color made darker, which on
    a dark palette is the color of the box itself: an unticked box (a frozen
    module's Train column) vanished. That primitive (item views draw theirs with it
    too) gets a palette whose Window is light enough for the outline to show;
    everything else is Fusion's.
    """
    #: Window color behind an indicator: Fusion's outline (140 % darker) is then #4f4f4f.
    OUTLINE_WINDOW = QColor("#6e6e6e")

    def __init__(self):
        super().__init__(QStyleFactory.create("Fusion"))

    def drawPrimitive(self, element, option, painter, widget=None) -> None:  # noqa: N802 - Qt override
        """Draw ``element``; a check box with a lighter Window color in its palette."""
        if element == QStyle.PrimitiveElement.PE_IndicatorCheckBox:
            option = type(option)(option)  # a copy: the caller's option keeps its palette
            palette = QPalette(option.palette)
            palette.setColor(_R.Window, self.OUTLINE_WINDOW)
            option.palette = palette
        super().drawPrimitive(element, option, painter, widget)


def is_dark(palette: QPalette) -> bool:
    """Whether ``palette`` is a dark one: its Base (where views draw) is darker than mid-grey.

    Drawings with colours of their own (the Graph tab's boxes) choose their dark set by it, whatever theme
    (a dark desktop under System included) set the palette.
    """
    return palette.color(_R.Base).lightnessF() < 0.5


def plot_colors(palette: QPalette) -> tuple[QColor, QColor]:
    """``(background, foreground)`` of a plot under ``palette``: its Base and Text colors."""
    return QColor(palette.color(_R.Base)), QColor(palette.color(_R.Text))


def apply_plot_colors(root: QWidget) -> int:
    """Restyle every pyqtgraph view under ``root`` (``root`` included) with the application palette's plot colors.

    Sets the view's background and, for every item in its scene, the axes' pen
    and text pen, the plot titles' color and the legends' text color. Data
    colors (curves, bars, markers) are left as they are.

    Returns
    -------
    int
        The number of views restyled.
    """
    background, foreground = plot_colors(QApplication.instance().palette())
    pg.setConfigOptions(background=background, foreground=foreground)
    views = root.findChildren(pg.GraphicsView)
    if isinstance(root, pg.GraphicsView):
        views.append(root)
    for view in views:
        view.setBackground(background)
        for item in view.scene().items():
            _restyle_item(item, foreground)
    return len(views)


def _restyle_item(item, foreground: QColor) -> None:
    if isinstance(item, pg.AxisItem):
        item.setPen(foreground)
        item.setTextPen(foreground)
    elif isinstance(item, pg.LegendItem):
        item.setLabelTextColor(foreground)
        for _sample, label in item.items:  # setLabelTextColor stores the color; the text is drawn again here
            label.setText(label.text, color=foreground)
    elif isinstance(item, pg.PlotItem):
        label = item.titleLabel
        label.opts["color"] = None  # the configured foreground, now and for later titles
        label.setText(label.text)


class ThemeChooser(QObject):
    """The View > Theme submenu: exclusive System / Light / Dark actions, remembered in QSettings.

    Parameters
    ----------
    menu : QMenu
        The View menu; the submenu "Theme" is added to it.
    settings : QSettings
        Where the choice is kept (``view/theme``).
    window : QWidget
        Its plots are restyled on every change.

    Attributes
    ----------
    actions : dict of str to QAction
        ``"system"``, ``"light"``, ``"dark"``; objectNames ``themeSystemAction``, ...
    """

    def __init__(self, menu: QMenu, settings: QSettings, window: QWidget):
        super().__init__(window)
        self._settings = settings
        self._window = window
        submenu = menu.addMenu("&Theme")
        submenu.setObjectName("themeMenu")
        group = QActionGroup(self)
        group.setExclusive(True)
        self.actions: dict[str, QAction] = {}
        for name, text in THEMES.items():
            action = submenu.addAction(text)
            action.setObjectName(f"theme{name.capitalize()}Action")
            action.setCheckable(True)
            action.setStatusTip("Follow the desktop's colors" if name == "system" else f"{name.capitalize()} colors")
            action.triggered.connect(lambda checked=True, n=name: self.set_theme(n))
            group.addAction(action)
            self.actions[name] = action
        self.actions[remembered_theme(settings)].setChecked(True)

    def set_theme(self, name: str, remember: bool = True) -> None:
        """Apply theme ``name`` to the application and the window's plots; ``remember`` keeps it in QSettings.

        Raises
        ------
        ValueError
            For a name not in :data:`THEMES`.
        """
        if name not in THEMES:
            raise ValueError(f"unknown theme {name!r}: choose one of {', '.join(THEMES)}")
        apply_theme(name)
        self.actions[name].setChecked(True)
        if remember:
            self._settings.setValue(THEME_KEY, name)
        apply_plot_colors(self._window)


def remembered_theme(settings: QSettings) -> str:
    """The theme kept in ``settings`` (``"system"`` when none, or an unknown one, is)."""
    name = str(settings.value(THEME_KEY, "system"))
    return name if name in THEMES else "system"
