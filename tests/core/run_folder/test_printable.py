"""Text escaped for a terminal (``workbench.core.run_folder.printable``)."""

from __future__ import annotations

import os

from workbench.core.run_folder.printable import printable


def test_printable_escapes_controls_bidi_overrides_and_undecodable_bytes():
    assert printable("run-1 é 学") == "run-1 é 学"
    assert printable("\x1b]0;pwned\x07") == "\\x1b]0;pwned\\x07"
    assert printable("a\nb\tc\x00") == "a\\x0ab\\x09c\\x00"
    assert printable("evil\u202etxt") == "evil\\u202etxt"
    assert printable(os.fsdecode(b"bad\xffname")) == "bad\\xffname"
    assert all(ch.isprintable() for ch in printable("".join(map(chr, range(0x20)))))


# ------------------------------------------------------------------------------------------ metrics.csv
