"""What every command prints: its result on stdout, an error as one line on stderr.

Names, specs and keys that come from files or installed packages can hold
control characters: every line of text is escaped (:func:`printable`) before it
reaches a terminal. JSON is printed as it is (``json.dumps`` escapes already).
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Iterable

__all__ = ["fail", "escaped", "write_out"]


def escaped(lines: Iterable[str]) -> str:
    """``lines`` joined by newlines, each escaped by :func:`workbench.core.run_folder.printable.printable`.

    Parameters
    ----------
    lines : iterable of str
        One line each; a newline inside one (from a file's key name) is escaped, never printed.
    """
    from workbench.core.run_folder.printable import printable

    return "\n".join(printable(line) for line in lines)


def write_out(text: str) -> None:
    """Print ``text`` and a newline to stdout; a reader that closed the pipe (``| head``) ends the output quietly.

    Parameters
    ----------
    text : str
        Printed as it is: escape lines from files with :func:`escaped` first.
    """
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `workbench contributions | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def fail(message: str, debug: bool, code: int = 1) -> int:
    """Print ``error: <message>`` as one line on stderr (the traceback first with ``--debug``).

    Parameters
    ----------
    message : str
        What went wrong, which file, what to do; escaped here (names and specs come from files).
    debug : bool
        Print the traceback of the exception being handled first.
    code : int
        The exit code to return (1 failed, 2 usage error).

    Returns
    -------
    int
        ``code``.
    """
    from workbench.core.run_folder.printable import printable

    if debug:
        traceback.print_exc()
    print(f"error: {printable(message)}", file=sys.stderr)
    return code
