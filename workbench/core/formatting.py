"""Number formatting shared by the command line and the UI.

Four forms, all plain strings:

- :func:`format_int` -- exact counts with thousands separators: ``11,689,512``;
- :func:`format_count` -- human-readable counts: ``11.7 M``;
- :func:`format_bytes` -- sizes in SI units (1 kB = 1000 bytes, like torchinfo
  and Lightning's model summary): ``46.8 MB``;
- :func:`format_flops` -- floating point operations as counted by
  ``torch.utils.flop_counter.FlopCounterMode`` (one multiply-add = 2 FLOPs):
  ``1.82 GFLOPs``.

Scaled values keep three significant digits (``1.82``, ``18.2``, ``182``).
``None`` becomes ``"-"`` everywhere, so a table cell for "not measured" needs
no special case.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "format_int",
    "format_count",
    "format_bytes",
    "format_flops",
    "format_shape",
    "parse_shape",
]

_COUNT_UNITS = ("", "K", "M", "B", "T")
_SI_PREFIXES = ("", "k", "M", "G", "T", "P")
_FLOP_PREFIXES = ("", "K", "M", "G", "T", "P")
MISSING = "-"


def _three_digits(value: float) -> str:
    """Format ``value`` (``0 <= value < 1000``) with three significant digits."""
    if value < 10:
        text = f"{value:.2f}"
    elif value < 100:
        text = f"{value:.1f}"
    else:
        text = f"{value:.0f}"
    return text


def _scaled(n: float, base: float, prefixes: Sequence[str]) -> tuple[str, str]:
    """Return (number text, prefix) for ``n`` scaled by powers of ``base``."""
    sign = "-" if n < 0 else ""
    value = abs(float(n))
    i = 0
    while value >= base and i < len(prefixes) - 1:
        value /= base
        i += 1
    # Rounding can carry into the next unit: 999,999 -> "1000 K" -> "1.00 M".
    if i < len(prefixes) - 1 and round(value, 2 if value < 10 else (1 if value < 100 else 0)) >= base:
        value /= base
        i += 1
    if i == 0:
        return sign + (f"{value:.0f}" if value == int(value) else _three_digits(value)), ""
    return sign + _three_digits(value), prefixes[i]


def format_int(n: int | None) -> str:
    """Exact integer with thousands separators.

    Parameters
    ----------
    n : int or None
        The count.

    Returns
    -------
    str
        ``format_int(11689512) == "11,689,512"``; ``"-"`` for None.
    """
    if n is None:
        return MISSING
    return f"{int(n):,}"


def format_count(n: int | float | None) -> str:
    """Human-readable count, three significant digits.

    Parameters
    ----------
    n : int, float or None
        A count such as a number of parameters.

    Returns
    -------
    str
        ``"512"``, ``"11.7 K"``, ``"11.7 M"``, ``"1.20 B"``; ``"-"`` for None.
    """
    if n is None:
        return MISSING
    text, unit = _scaled(n, 1000.0, _COUNT_UNITS)
    return f"{text} {unit}" if unit else text


def format_bytes(n: int | float | None) -> str:
    """Size in bytes, SI units (1 kB = 1000 B, 1 MB = 10**6 B).

    Parameters
    ----------
    n : int, float or None
        A size in bytes.

    Returns
    -------
    str
        ``"512 B"``, ``"46.8 MB"``, ``"1.20 GB"``; ``"-"`` for None.
    """
    if n is None:
        return MISSING
    text, prefix = _scaled(n, 1000.0, _SI_PREFIXES)
    return f"{text} {prefix}B"


def format_flops(n: int | float | None) -> str:
    """Floating point operations, three significant digits.

    Parameters
    ----------
    n : int, float or None
        FLOPs as counted by ``FlopCounterMode`` (a multiply-add counts 2).

    Returns
    -------
    str
        ``"640 FLOPs"``, ``"1.82 GFLOPs"``; ``"-"`` for None.
    """
    if n is None:
        return MISSING
    text, prefix = _scaled(n, 1000.0, _FLOP_PREFIXES)
    return f"{text} {prefix}FLOPs"


def format_shape(shape: Sequence[int] | str | None) -> str:
    """Shape as ``"[1, 64, 112, 112]"``; strings pass through, None gives ``"-"``.

    Parameters
    ----------
    shape : sequence of int, str or None
        A tensor shape, or a short description such as ``"tuple of 2"``.

    Returns
    -------
    str
    """
    if shape is None:
        return MISSING
    if isinstance(shape, str):
        return shape
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


def parse_shape(text: str | Sequence[int]) -> tuple[int, ...]:
    """Parse an input shape such as ``"1,3,224,224"`` (also ``"1x3x224x224"``, ``"(1, 3, 224, 224)"``).

    Parameters
    ----------
    text : str or sequence of int
        The shape; a sequence is checked and returned as a tuple.

    Returns
    -------
    tuple of int
        Every dimension is a positive integer.

    Raises
    ------
    ValueError
        When a dimension is not a positive integer or the shape is empty.
    """
    if isinstance(text, str):
        cleaned = text.strip().strip("()[]")
        if "," not in cleaned:
            cleaned = cleaned.replace("x", ",").replace("×", ",")
        parts = [p.strip() for p in cleaned.split(",")]
        if parts and parts[-1] == "":  # a trailing comma: "(1,)"
            parts.pop()
    else:
        parts = list(text)
    if not parts:
        raise ValueError(f"empty shape {text!r}; write it like 1,3,224,224")
    dims = []
    for p in parts:
        try:
            d = int(p)
        except (TypeError, ValueError):
            raise ValueError(f"shape {text!r}: {p!r} is not an integer; write it like 1,3,224,224") from None
        if d <= 0:
            raise ValueError(f"shape {text!r}: dimensions must be positive, got {d}")
        dims.append(d)
    return tuple(dims)
