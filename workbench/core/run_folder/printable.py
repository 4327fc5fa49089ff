"""Text of a run folder made safe to show: :func:`printable` (control and invisible characters escaped).

Folder names and file contents go to a terminal or a table: an escape sequence
in them must show as text, never act. Qt-free.
"""

from __future__ import annotations


__all__ = ["printable"]


def printable(text: object) -> str:
    """``str(text)`` with every control or invisible character escaped (``\\x1b``, ``\\u202e``).

    Folder names and file contents go to a terminal or a table: an escape
    sequence in them must show as text, never act. A byte that was not UTF-8 in
    a file name (a lone surrogate from ``surrogateescape``) shows as ``\\xNN``.
    """
    s = str(text)
    if s.isprintable():
        return s
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in s)


def _escape(ch: str) -> str:
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape'd byte of a file name
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
