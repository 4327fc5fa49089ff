"""CSV cells a spreadsheet will not run: :func:`escape_cell` and :func:`writer`, and :func:`unescape_cell` to read back.

A run folder named ``=cmd|' -C calc'!A0`` exported to CSV and opened in a
spreadsheet is a formula that starts a program (CSV injection). OWASP's rule:
a cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return
gets a single quote in front, so the spreadsheet shows it as text. Numbers
stay numbers: ``-0.5`` and ``-inf`` are left alone (they parse as floats, and a
spreadsheet reads them as numbers, not formulas). Every CSV Workbench writes
goes through :func:`writer` (or :func:`escape_cell`), and Workbench's readers
of its own CSVs undo it with :func:`unescape_cell`, so a metric named ``-x``
reads back as ``-x``. Qt-free.
"""

from __future__ import annotations

import csv
from typing import Any, Iterable

__all__ = ["FORMULA_STARTS", "escape_cell", "unescape_cell", "writer", "dict_writer"]

#: First characters that make a spreadsheet read a cell as a formula (OWASP, "CSV Injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _formula_like(text: str) -> bool:
    """``text``, once its leading quotes are dropped, starts as a formula (and is not a number)."""
    rest = text.lstrip("'")
    return rest.startswith(FORMULA_STARTS) and not _is_number(rest)


def escape_cell(value: Any) -> Any:
    """``value`` as a CSV cell a spreadsheet shows as text: ``"'" + value`` when it would start a formula.

    Only strings change: one that starts with one of :data:`FORMULA_STARTS`
    and is not a number (``"-0.5"`` stays), or that is such a string behind
    leading single quotes (so :func:`unescape_cell` gives back exactly what was
    written). Numbers and anything else are returned as they are.
    """
    if isinstance(value, str) and value and _formula_like(value):
        return "'" + value
    return value


def unescape_cell(text: str) -> str:
    """What :func:`escape_cell` was given: ``text`` without the quote it added (other text unchanged)."""
    if text.startswith("'") and _formula_like(text):
        return text[1:]
    return text


class _EscapingWriter:
    """A ``csv.writer`` whose rows' cells go through :func:`escape_cell`."""

    def __init__(self, inner):
        self._inner = inner

    def writerow(self, row: Iterable[Any]):
        return self._inner.writerow([escape_cell(v) for v in row])

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        for row in rows:
            self.writerow(row)


def writer(f, **kwargs) -> _EscapingWriter:
    """``csv.writer(f, **kwargs)`` whose every cell is :func:`escape_cell`-ed (``writerow``, ``writerows``)."""
    return _EscapingWriter(csv.writer(f, **kwargs))


class _EscapingDictWriter(csv.DictWriter):
    """A ``csv.DictWriter`` whose header and values go through :func:`escape_cell`."""

    def writeheader(self):
        return self.writer.writerow([escape_cell(name) for name in self.fieldnames])

    def writerow(self, rowdict):
        return super().writerow({k: escape_cell(v) for k, v in rowdict.items()})

    def writerows(self, rowdicts) -> None:
        for row in rowdicts:
            self.writerow(row)


def dict_writer(f, fieldnames, **kwargs) -> csv.DictWriter:
    """``csv.DictWriter(f, fieldnames, **kwargs)`` whose header and cells are :func:`escape_cell`-ed."""
    return _EscapingDictWriter(f, fieldnames, **kwargs)
