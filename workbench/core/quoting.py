"""User data quoted in a message, shortened: :func:`quoted`.

A message quotes a cell, a column name or a key from the user's file so they
can find it; the file decides how long that is. A 1 GB one-line CSV once made
one error line of 1 GB (and 4 GB of memory to build it). Every message that
quotes user data goes through :func:`quoted`: at most :data:`MAX_QUOTED_CHARS`
characters of it, its length said when cut, control characters escaped. Qt-free.
"""

from __future__ import annotations

from workbench.core.run_folder.printable import printable

__all__ = ["MAX_QUOTED_CHARS", "MAX_QUOTED_ITEMS", "shortened", "quoted", "names_list", "short_repr"]

#: Characters of a piece of user data a message shows: enough to recognise a column name or a cell (most are
#: under 30), small enough that a thousand of them still make a readable line.
MAX_QUOTED_CHARS = 40
#: Items of a list of user names a message shows (then "... (N more)").
MAX_QUOTED_ITEMS = 20


def shortened(value: object, limit: int = MAX_QUOTED_CHARS) -> str:
    """At most ``limit`` characters of ``str(value)``, control characters escaped, its length said when cut.

    Only the first ``limit`` characters are looked at again (escaping works on
    them alone), so the time and memory spent do not grow with the data beyond
    ``str(value)`` itself.

    Parameters
    ----------
    value : object
        A cell, a column name, a key (``str()`` of it is shown).
    limit : int
        Characters shown at most (the rest is cut).

    Returns
    -------
    str
        ``text``, or ``text… (N chars)`` when cut (N: the length of ``str(value)``).
    """
    text = value if isinstance(value, str) else str(value)
    shown = printable(text[:limit])
    return shown if len(text) <= limit else f"{shown}… ({len(text):,} chars)"


def quoted(value: object, limit: int = MAX_QUOTED_CHARS) -> str:
    """:func:`shortened` in single quotes, as ``repr`` quotes a string: ``'text'`` or ``'text…' (N chars)``."""
    text = value if isinstance(value, str) else str(value)
    shown = printable(text[:limit]).replace("'", "\\'")
    return f"'{shown}'" if len(text) <= limit else f"'{shown}…' ({len(text):,} chars)"


def names_list(values, limit: int = MAX_QUOTED_ITEMS) -> str:
    """``a, b, ... (N more)``: at most ``limit`` items of ``values``, each :func:`shortened`."""
    values = list(values)
    more = f", ... ({len(values) - limit:,} more)" if len(values) > limit else ""
    return ", ".join(shortened(v) for v in values[:limit]) + more


def short_repr(value: object, limit: int = MAX_QUOTED_CHARS, _depth: int = 0) -> str:
    """``repr(value)`` for a message, bounded whatever ``value`` holds (a value read from a file).

    A string is :func:`quoted`; a list, tuple or dict shows its first 3 items
    (two levels deep) and its length; anything else is :func:`shortened` ``repr``.
    """
    if isinstance(value, str):
        return quoted(value, limit)
    if isinstance(value, (list, tuple, dict)):
        if _depth >= 2:
            return "[...]" if not isinstance(value, dict) else "{...}"
        items = list(value.items())[:3] if isinstance(value, dict) else list(value[:3])
        if isinstance(value, dict):
            shown = [f"{short_repr(k, limit, _depth + 1)}: {short_repr(v, limit, _depth + 1)}" for k, v in items]
        else:
            shown = [short_repr(v, limit, _depth + 1) for v in items]
        more = f", ... ({len(value):,} items)" if len(value) > 3 else ""
        ends = "{}" if isinstance(value, dict) else "()" if isinstance(value, tuple) else "[]"
        return ends[0] + ", ".join(shown) + more + ends[1]
    return shortened(repr(value), limit)
