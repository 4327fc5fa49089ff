"""The exporters' noise off, and their errors as one line. Qt-free."""

from __future__ import annotations

import contextlib
import io
import logging
import re
import warnings
from collections.abc import Iterator

__all__ = ["quiet", "first_line", "where"]

#: Loggers whose warnings during an export are the exporters' own diagnostics, not the user's business
#: (onnxscript's constant folding "Evaluation failed", torch's symbolic-shape notes); errors still show.
_LOGGERS = ("onnxscript", "torch")
_COLOURS = re.compile(r"\x1b\[[0-9;]*m")
# A traced line in torch.export's partial graph: "# File: /x/model.py:9 in forward, code: if y.sum() > 0:"
_TRACED = re.compile(r"# File: (?P<file>[^\n]+?):(?P<line>\d+) in (?P<fn>\w+), code: (?P<code>[^\n]*)")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Warnings, the loggers of :data:`_LOGGERS` below ERROR, and ``sys.stderr`` off while exporting; restored after.

    ``torch.export`` prints the partial graph of a failed export to ``sys.stderr``
    (``_trace.py``) before raising; the caller reports the reason in one line instead.
    """
    loggers = [logging.getLogger(name) for name in _LOGGERS]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def first_line(exc: BaseException) -> str:
    """``"Type: first line"`` of the innermost cause of ``exc`` (the exporters wrap the reason), without colours."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = _COLOURS.sub("", str(exc)).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()


def where(exc: BaseException) -> str:
    """The last line of the user's code (not torch's) that the failed export traced: ``"model.py:9 in forward:
    if y.sum() > 0:"``, from the partial graph torch.export attaches; ``""`` when there is none."""
    found = ""
    while exc is not None:
        text = f"{exc}\n{getattr(exc, 'partial_fx_graph', '') or ''}"
        for m in _TRACED.finditer(text):
            if "site-packages" not in m["file"] and "/torch/" not in m["file"]:
                found = f"{m['file'].rsplit('/', 1)[-1]}:{m['line']} in {m['fn']}: {m['code'].strip()}"
        exc = exc.__cause__
    return found
