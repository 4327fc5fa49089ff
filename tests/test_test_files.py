"""Tests mirror the code: every module of ``workbench/core`` over 100 lines has a test file of its own.

``workbench/core/<path>/<name>.py`` is tested by ``tests/core/<path>/test_<name>.py`` (for example
``tests/core/probe/test_callback.py`` for ``workbench/core/probe/callback.py``). Feature tests that cross
modules may live anywhere; this only asks that each large module has its own file, so that a newcomer
finds a module's tests where the module is.

A module may be left out only in :data:`EXCUSED`, with a one-line reason; an entry whose module is gone,
is no longer over the limit, or now has its test file fails too, so the list only shrinks.
"""

from __future__ import annotations

from pathlib import Path

import workbench

ROOT = Path(workbench.__file__).resolve().parent.parent
CORE = ROOT / "workbench" / "core"
#: A module with more lines than this needs a test file of its own.
MAX_LINES = 100

#: Modules left without a test file of their own: path from the repository root -> why, in one line.
#: Empty: every core module over the limit has one.
EXCUSED: dict[str, str] = {}


def line_count(path: Path) -> int:
    """Lines of a file as ``wc -l`` counts them (newline characters)."""
    return path.read_bytes().count(b"\n")


def test_file_of(module: Path) -> Path:
    """``tests/core/<path>/test_<name>.py`` of ``workbench/core/<path>/<name>.py``.

    A package's ``__init__.py`` is the module named after its folder: ``workbench/core/model/formats/__init__.py``
    (``workbench.core.model.formats``) is tested by ``tests/core/model/test_formats.py``.
    """
    relative = module.relative_to(CORE)
    if relative.name == "__init__.py":
        relative = relative.parent.with_suffix(".py") if relative.parent.name else Path("core.py")
    return ROOT / "tests" / "core" / relative.parent / f"test_{relative.name}"


test_file_of.__test__ = False  # a helper named test_*: not a test


def large_modules() -> list[Path]:
    """Every module of ``workbench/core`` over :data:`MAX_LINES` lines, sorted."""
    return sorted(p for p in CORE.rglob("*.py") if line_count(p) > MAX_LINES)


def name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_every_large_core_module_has_a_test_file_of_its_own():
    missing = [f"{name(m)} -> {name(test_file_of(m))}" for m in large_modules()
               if not test_file_of(m).is_file() and name(m) not in EXCUSED]
    assert not missing, (f"{len(missing)} module(s) of workbench/core over {MAX_LINES} lines have no test file of "
                         "their own (write it, or excuse the module in EXCUSED with a one-line reason):\n"
                         + "\n".join(missing))


def test_every_excuse_is_still_needed_and_has_a_reason():
    stale = []
    for module, reason in EXCUSED.items():
        path = ROOT / module
        if not reason.strip() or "\n" in reason:
            stale.append(f"{module}: give a one-line reason")
        elif not path.is_file():
            stale.append(f"{module}: no such module any more")
        elif line_count(path) <= MAX_LINES:
            stale.append(f"{module}: {line_count(path)} lines, not over {MAX_LINES}")
        elif test_file_of(path).is_file():
            stale.append(f"{module}: has its test file {name(test_file_of(path))} now")
    assert not stale, "remove these entries from EXCUSED:\n" + "\n".join(stale)


def test_the_mirror_rule_maps_paths_as_documented():
    assert name(test_file_of(CORE / "probe" / "callback.py")) == "tests/core/probe/test_callback.py"
    assert name(test_file_of(CORE / "digest.py")) == "tests/core/test_digest.py"
    assert name(test_file_of(CORE / "model" / "formats" / "__init__.py")) == "tests/core/model/test_formats.py"
    assert name(test_file_of(CORE / "__init__.py")) == "tests/core/test_core.py"
    assert CORE / "model" / "tree.py" in large_modules()  # the walk reaches nested modules
