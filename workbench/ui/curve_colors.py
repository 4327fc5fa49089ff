"""Data colours of the training plots, readable on the light and the dark theme's plot background alike.

The plots' background follows the theme (white or ``#1e1e1e``, see
:func:`workbench.ui.theme.plot_colors`) while the curves keep the colour they were
created with, so each colour here is a mid-tone whose contrast ratio is at least
:data:`MIN_CONTRAST` against both backgrounds: a relative luminance between about
0.14 and 0.30. The raw training loss is a greyed blue and its EMA a saturated
blue, told apart by saturation rather than by lightness (a dark-blue EMA all but
vanished on the dark background: 1.97:1).
"""

from __future__ import annotations

__all__ = ["CURVE_COLORS", "MIN_CONTRAST", "contrast_ratio", "relative_luminance"]

#: Least contrast ratio of a curve against the plot background: WCAG 2.1 success
#: criterion 1.4.11 (non-text contrast) asks 3:1 for graphical objects.
MIN_CONTRAST = 3.0

#: Curve name -> RGB. Contrast against white / ``#1e1e1e`` in the comments.
CURVE_COLORS: dict[str, tuple[int, int, int]] = {
    "train_loss": (110, 130, 170),  # 3.9 / 4.3
    "train_loss_ema": (0, 110, 230),  # 4.8 / 3.5
    "val_loss": (220, 110, 20),  # 3.3 / 5.0
    "best": (170, 120, 0),  # 3.9 / 4.3 (the best-epoch line and its label)
    "val_acc": (30, 150, 70),  # 3.8 / 4.4
    "lr": (165, 80, 185),  # 4.7 / 3.5
    "grad_norm": (210, 70, 70),  # 4.5 / 3.7
    "freeze": (210, 70, 70),  # the freeze-change lines and labels
}


def relative_luminance(rgb) -> float:
    """Relative luminance of an sRGB colour, 0 (black) to 1 (white).

    The WCAG 2.1 definition (https://www.w3.org/TR/WCAG21/#dfn-relative-luminance):
    each channel ``c`` in [0, 1] is linearised as ``c / 12.92`` when ``c <= 0.04045``,
    else ``((c + 0.055) / 1.055) ** 2.4``; then ``L = 0.2126 R + 0.7152 G + 0.0722 B``.

    Parameters
    ----------
    rgb : sequence of int, or QColor
        Red, green, blue in 0..255 (a ``QColor`` is read with ``getRgb``).

    Returns
    -------
    float
    """
    if hasattr(rgb, "getRgb"):
        rgb = rgb.getRgb()[:3]

    def channel(v: float) -> float:
        c = v / 255.0
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(float(v)) for v in tuple(rgb)[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast_ratio(a, b) -> float:
    """WCAG 2.1 contrast ratio ``(L1 + 0.05) / (L2 + 0.05)`` of two colours (L1 the lighter), 1 to 21.

    https://www.w3.org/TR/WCAG21/#dfn-contrast-ratio

    Parameters
    ----------
    a, b : sequence of int, or QColor
        The two colours (see :func:`relative_luminance`).

    Returns
    -------
    float
    """
    la, lb = sorted((relative_luminance(a), relative_luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)
