"""The rules of the house (DESIGN.md), each a check that fails the build.

The import rules (core imports no Qt, core.model knows nothing of training or
probes, the ui wings are independent, cli > ui > core, the order of the training
rooms and of the trainer's parts, no import cycles, imports for type hints
included) are import-linter contracts in pyproject.toml; ``make test`` runs
``lint-imports`` first and :func:`test_import_contracts_are_kept` runs it again
here. The rest read the source: no mixins, one ``torch.load``, no imports of
private names from other modules, importing every core module loads no Qt, and
every room of ``workbench.core.train`` says what it holds.
"""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path

import workbench
import workbench.core

PACKAGE = Path(workbench.__file__).resolve().parent


def _sources() -> dict[str, ast.Module]:
    return {str(p.relative_to(PACKAGE.parent)): ast.parse(p.read_text(encoding="utf-8"))
            for p in sorted(PACKAGE.rglob("*.py"))}


def _importlinter() -> dict:
    return tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]


def test_import_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(lint)], capture_output=True, text=True, cwd=PACKAGE.parent)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert f"{len(_importlinter()['contracts'])} kept, 0 broken" in out.stdout


def test_imports_for_type_hints_count_in_the_contracts():
    """A TYPE_CHECKING import closes a circle like any other: the parts take a Protocol instead."""
    settings = _importlinter()
    assert settings["exclude_type_checking_imports"] is False
    kinds = {c["type"] for c in settings["contracts"]}
    assert {"acyclic_siblings", "layers"} <= kinds
    layered = {tuple(c.get("containers", ())) for c in settings["contracts"] if c["type"] == "layers"}
    assert ("workbench.core.train",) in layered and ("workbench.core.train.trainer",) in layered


def test_every_training_room_is_a_package_that_says_what_it_holds():
    train = PACKAGE / "core" / "train"
    rooms = sorted(p for p in train.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert {"trainer", "data", "launch", "runs"} <= {p.name for p in rooms}
    for room in [train, *rooms]:
        init = room / "__init__.py"
        assert init.is_file(), f"{room.relative_to(PACKAGE.parent)} has no __init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        summary = doc.split("\n", 1)[0]
        assert summary.endswith("."), f"{init.relative_to(PACKAGE.parent)}: a docstring opening with a one-line summary"


def test_no_mixins():
    mixins = [f"{path}: {node.name}" for path, tree in _sources().items() for node in ast.walk(tree)
              if isinstance(node, ast.ClassDef) and node.name.endswith("Mixin")]
    assert mixins == []


def test_torch_load_is_called_in_one_module_only():
    calls = []
    for path, tree in _sources().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch":
                calls.append(path)
    assert set(calls) == {"workbench/core/model/formats/pickle_safety.py"}


def test_weights_only_false_only_after_the_trust_check():
    sites = []
    for path, tree in _sources().items():
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and any(
                        k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is False
                        for k in node.keywords):
                    sites.append((path, fn, node))
    # opening a file, and rebuilding the window's own model in its training process
    assert len(sites) == 2
    for path, fn, call in sites:
        guards = [n for n in ast.walk(fn) if isinstance(n, ast.If) and ast.unparse(n.test) == "not trust"
                  and isinstance(n.body[0], ast.Raise) and n.lineno < call.lineno]
        assert path in ("workbench/core/model/formats/pickle_safety.py", "workbench/core/model/wire.py") \
            and guards, fn.name


def test_no_module_imports_private_names_of_another():
    found = []
    for path, tree in _sources().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("workbench"):
                found += [f"{path}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert found == []


def test_importing_every_core_module_imports_no_qt():
    names = [m.name for m in pkgutil.walk_packages(workbench.core.__path__, "workbench.core.")]
    assert "workbench.core.model.opening" in names and "workbench.core.train.trainer.control" in names
    code = (
        "import sys, importlib\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph', 'PyQt5', 'PyQt6', 'shiboken6'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"workbench.core imported Qt modules: {out.stdout.strip()}"
