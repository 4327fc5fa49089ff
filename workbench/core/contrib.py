"""The contributions registry: one place that turns a named contribution into a callable.

A contribution is a name of a given kind that resolves to a callable, loaded
only when used (as napari's npe2 manifests do). The kinds are :data:`KINDS`:

======================  ==============================  ==========================================
kind                    entry-point group               the callable
======================  ==============================  ==========================================
``"architecture"``      ``workbench.architectures``     ``factory(**kwargs) -> nn.Module``
``"dataset"``           ``workbench.datasets``          ``make(**kwargs) -> (train, val)`` or ``{"train", "val", "collate_fn"}``
``"step"``              ``workbench.steps``             ``step(model, batch) -> loss`` or ``{"loss": loss, ...}``
``"metric"``            ``workbench.metrics``           ``metric(output, target) -> number``
``"loss"``              ``workbench.losses``            ``loss(output, target) -> 0-d tensor`` (a class: built without arguments)
``"probe"``             ``workbench.probes``            ``Class(sink, **kwargs) -> Callback``
``"format"``            ``workbench.formats``           a module or object with ``match(path, head)`` and ``read(path, *, trust, head)``
======================  ==============================  ==========================================

A name resolves from, in order:

1. **builtins**: Workbench's own (:data:`BUILTINS`, kept as ``"pkg.mod:attr"``
   strings so nothing is imported before it is used) and, for architectures,
   torchvision's model builders (built with ``weights=None``: never a download);
2. **entry points** of installed packages, group ``workbench.<kind>s``
   (``docs/plugins.md`` has a worked example). Installing a package is the
   user's own decision, as installing torchvision is: its contributions
   resolve without asking. A name a builtin already has stays the builtin's;
3. for architectures, **timm's models** when timm is installed:
   ``"timm/<model_name>"`` (as the hub names them), and a bare timm name that
   no source above has (``"resnet50d"``, ``"convnext_atto"``), built with
   ``timm.create_model(name, pretrained=False, **kwargs)``. Their names are
   listed from a small file per timm version in :func:`cache_dir` (importing
   timm takes 0.5 s on top of torchvision, 4 s from a cold disk, so it is
   imported once per timm version to list, and otherwise only to build);
4. **specs**: ``"pkg.mod:callable"`` or ``"path/to/file.py:callable"``. A file
   inside a package (its folder has ``__init__.py``) is imported as part of
   that package, so its relative imports work (:func:`import_file_module`).

The trust rule of ``DESIGN.md`` ("Safety contract") is applied here and
nowhere else. A file (a checkpoint, a safetensors header, a run.toml, a model
folder) may name code; reading the name is harmless, importing or calling it
runs whatever it names (``os:system`` included). So:

* a **registered** name (a builtin, an entry point, or the exact
  ``"pkg.mod:attr"`` one of them registers) resolves without asking;
* any other spec **read from a file** raises
  :class:`~workbench.core.errors.TrustRequired` (``kind="code"``) naming the
  spec and the file, before anything is imported; the caller asks the user (the
  window: a dialog whose default is Cancel; the command line: ``--trust``), and
  a relative ``file.py`` path then resolves against that file's folder;
* a spec **typed by the user** (``--arch``, the window's spec field) is the
  user's own decision: ``origin=None``, nothing to ask;
* keyword arguments read from a file are plain data only (:func:`plain_kwargs`)
  and never make a registered architecture download weights (:func:`no_downloads`).

Listing (:func:`names`, :func:`contributions`) reads the installed packages'
metadata only: it imports none of them (timm once per timm version, see 3.).
``timm:create_model`` itself is not registered: it also takes ``hf-hub:``
names (downloads), so a file naming it needs trust like any spec; files name
timm models as ``timm/<model_name>``. Qt-free; imports neither
``core.train`` nor ``core.probe`` (their builtins are strings).
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, Callable, Mapping

from workbench.core import versions, warm_imports
from workbench.core.errors import ArchitectureError, ContributionError, DataError, TrustRequired, WorkbenchError
from workbench.core.files import atomic_write_bytes

__all__ = ["KINDS", "BUILTINS", "Contribution", "group", "contributions", "names", "is_registered", "check",
           "resolve", "own_contributions", "load_callable", "file_module_name", "import_file_module", "plain_kwargs", "plain_args",
           "no_downloads", "cache_dir", "canonical_spec", "MOVED_SPECS", "timm_names", "timm_model",
           "TIMM_PREFIX"]

#: The kinds of contribution, singular; the entry-point group of each is :func:`group`.
KINDS = ("architecture", "dataset", "step", "metric", "loss", "probe", "format")

#: Workbench's own contributions: kind -> name -> ``"pkg.mod:attr"`` (imported when resolved).
BUILTINS: dict[str, dict[str, str]] = {
    "architecture": {"digits_cnn": "workbench.core.model.demo:DigitsCNN",
                     "tabular_mlp": "workbench.core.model.tabular_mlp:tabular_mlp"},
    "dataset": {},
    "step": {},
    "metric": {},
    "loss": {},
    "probe": {"live_probes": "workbench.core.probe.callback:ProbeCallback"},
    "format": {},  # the built-in formats are workbench.core.model.formats.BUILTIN_FORMATS, asked before these
}

#: Workbench's own builders that a file may name without trust, though they are listed nowhere (they need
#: arguments only a file gives): what an opened Hugging Face / timm model folder records as its architecture
#: (:mod:`workbench.core.model.hf_build`: the config as plain JSON, checked to name a class of the installed
#: library; timm models always built with ``pretrained=False``).
SAFE_BUILDERS: dict[str, frozenset[str]] = {"architecture": frozenset({
    "workbench.core.model.hf_build:build_hf_model", "workbench.core.model.hf_build:build_timm_model",
    "workbench.core.model.hf_folder:build_hf_model", "workbench.core.model.hf_folder:build_timm_model"})}
#: Specs that moved: the old ``"pkg.mod:attr"`` (in files saved before the move, and in run.toml files)
#: -> where it lives now. The one alias table: :func:`canonical_spec` applies it wherever a spec resolves.
MOVED_SPECS: dict[str, str] = {
    "workbench.core.model.hf_folder:build_hf_model": "workbench.core.model.hf_build:build_hf_model",
    "workbench.core.model.hf_folder:build_timm_model": "workbench.core.model.hf_build:build_timm_model",
}

#: The error each kind raises (all are :class:`~workbench.core.errors.WorkbenchError`).
_ERRORS: dict[str, type[WorkbenchError]] = {"architecture": ArchitectureError, "dataset": DataError}
#: What a contributed name may look like: no ``:``, ``/``, ``(`` or spaces, which mean a spec.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
#: Prefix of the module a ``file.py:callable`` is imported as (the training process relies on it).
FILE_MODULE_PREFIX = "_workbench_factory_"
#: Keyword arguments of registered builders that would download weights when set.
_DOWNLOAD_KWARGS = ("weights", "weights_backbone", "pretrained", "pretrained_backbone")
#: Nesting depth of plain data accepted from a file (a dict of lists of dicts ...).
_MAX_DEPTH = 8
#: How a timm model is named as a registered architecture: ``"timm/resnet50d"``.
TIMM_PREFIX = "timm/"


@dataclass(frozen=True)
class Contribution:
    """One registered contribution, as listed (nothing of it imported).

    Attributes
    ----------
    kind : str
        One of :data:`KINDS`.
    name : str
        What a user or a file names it by (``"tiny_mlp"``).
    target : str
        What it resolves to, ``"pkg.mod:attr"`` (``"torchvision.models:resnet18"``).
    source : str
        Where it comes from: ``"builtin"``, ``"torchvision"``, or the
        distribution and version of the package (``"workbench-example-plugin 0.1.0"``).
    """

    kind: str
    name: str
    target: str
    source: str


def group(kind: str) -> str:
    """The entry-point group of ``kind``: ``"workbench.architectures"`` for ``"architecture"``.

    Raises
    ------
    ValueError
        ``kind`` is not one of :data:`KINDS`.
    """
    _check_kind(kind)
    return "workbench.losses" if kind == "loss" else f"workbench.{kind}s"


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown contribution kind {kind!r}; the kinds are {', '.join(KINDS)}")


def _error(kind: str) -> type[WorkbenchError]:
    return _ERRORS.get(kind, ContributionError)


def _is_spec(name: str) -> bool:
    return ":" in name or "/" in name or "\\" in name


# --------------------------------------------------------------------------- the cache folder and timm's names


def cache_dir() -> Path:
    """Workbench's cache folder: ``$WORKBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/workbench``, else ``~/.cache/workbench``.

    Not created here. It holds derived data only (name lists, the architecture
    index), rebuilt when missing or damaged.
    """
    own = os.environ.get("WORKBENCH_CACHE_DIR")
    if own:
        return Path(own).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "workbench"


def canonical_spec(spec: Any) -> Any:
    """``spec`` where it lives now (:data:`MOVED_SPECS`); anything else unchanged."""
    return MOVED_SPECS.get(spec, spec) if isinstance(spec, str) else spec


_TIMM_NAMES: dict[tuple[str, str], frozenset[str]] = {}


def timm_names() -> frozenset[str]:
    """timm's model names (``timm.list_models()``), empty when timm is not installed.

    Read from ``timm-<version>-names.json`` in :func:`cache_dir` when it is
    there (no import: a few milliseconds); else timm is imported once (0.5-4 s)
    and the file written. Remembered for the process (per cache folder).
    """
    ver = versions.library_version("timm")
    if ver is None:
        return frozenset()
    path = cache_dir() / f"timm-{ver}-names.json"
    memo = (ver, str(path))
    if memo in _TIMM_NAMES:
        return _TIMM_NAMES[memo]
    listed: Any = None
    try:
        listed = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    if not (isinstance(listed, list) and listed and all(isinstance(n, str) for n in listed)):
        try:
            import timm
        except Exception:  # a broken install lists nothing rather than taking the caller down
            return frozenset()
        listed = sorted(timm.list_models())
        try:
            atomic_write_bytes(path, json.dumps(listed).encode())
        except OSError:  # a read-only cache: list again next time
            pass
    _TIMM_NAMES[memo] = frozenset(listed)
    return _TIMM_NAMES[memo]


def timm_model(name: str, *, bare: bool = True) -> str | None:
    """The timm model ``name`` stands for: ``"timm/resnet50d"`` or (with ``bare``) ``"resnet50d"``; else None.

    A bare name counts only when it is not Workbench's, an installed package's
    or torchvision's (those win, as in :func:`resolve`).
    """
    if not isinstance(name, str):
        return None
    if name.startswith(TIMM_PREFIX):
        model = name[len(TIMM_PREFIX):]
        return model if model in timm_names() else None
    if not bare or _is_spec(name) or name in BUILTINS["architecture"] or name in _entry_points("architecture"):
        return None
    if name in timm_names() and name not in _torchvision_names("architecture"):
        return name
    return None


# --------------------------------------------------------------------------- listing


def _torchvision_names(kind: str) -> list[str]:
    if kind != "architecture":
        return []
    import torchvision

    return sorted(torchvision.models.list_models())


def _entry_points(kind: str) -> dict[str, list[EntryPoint]]:
    """Installed entry points of ``kind`` by name (metadata only: nothing is imported)."""
    found: dict[str, list[EntryPoint]] = {}
    for ep in entry_points(group=group(kind)):
        if _NAME.fullmatch(ep.name):
            found.setdefault(ep.name, []).append(ep)
    return found


def _source(ep: EntryPoint) -> str:
    dist = ep.dist
    return f"{dist.name} {dist.version}" if dist is not None else "an installed package"


def contributions(kind: str) -> list[Contribution]:
    """Every registered contribution of ``kind``: builtins, installed packages' (by name), torchvision's, timm's.

    Reads package metadata only; no contributing package is imported (torchvision
    is, for its model list; timm once per timm version, see :func:`timm_names`).
    A name registered twice is listed once, the first source winning as in
    :func:`resolve`. timm's models are listed as ``"timm/<name>"``, target
    ``"timm:create_model"`` (what they are built with: the name is the first argument).

    Raises
    ------
    ValueError
        ``kind`` is not one of :data:`KINDS`.
    """
    _check_kind(kind)
    tv = _torchvision_names(kind)
    out = own_contributions(kind, skip=frozenset(tv))
    out += [Contribution(kind, name, f"torchvision.models:{name}", "torchvision") for name in tv]
    if kind == "architecture":
        ver = versions.library_version("timm")
        out += [Contribution(kind, TIMM_PREFIX + name, "timm:create_model", f"timm {ver}")
                for name in sorted(timm_names())]
    return out


def own_contributions(kind: str, skip: frozenset[str] = frozenset()) -> list[Contribution]:
    """Workbench's builtins and installed packages' contributions of ``kind`` (no library's models; nothing imported).

    ``skip``: names to leave out of the packages' (torchvision's, which win).

    Raises
    ------
    ValueError
        ``kind`` is not one of :data:`KINDS`.
    """
    _check_kind(kind)
    taken = set(BUILTINS[kind]) | set(skip)
    out = [Contribution(kind, name, target, "builtin") for name, target in BUILTINS[kind].items()]
    for name, eps in sorted(_entry_points(kind).items()):
        if name not in taken:
            out.append(Contribution(kind, name, eps[0].value, ", ".join(_source(ep) for ep in eps)))
    return out


def names(kind: str) -> list[str]:
    """The names of :func:`contributions` (``["digits_cnn", "tiny_mlp", "alexnet", ...]`` for architectures).

    Raises
    ------
    ValueError
        ``kind`` is not one of :data:`KINDS`.
    """
    return [c.name for c in contributions(kind)]


def is_registered(kind: str, name: str) -> bool:
    """True when ``name`` is a registered contribution of ``kind``: resolving it needs no trust.

    Parameters
    ----------
    kind : str
        One of :data:`KINDS`.
    name : str
        A name without arguments (``"resnet18"``, ``"tiny_mlp"``) or a spec
        (``"pkg.mod:fn"``): a spec is registered only when it is exactly the
        target of a builtin or an installed entry point.

    Raises
    ------
    ValueError
        ``kind`` is not one of :data:`KINDS`.
    """
    _check_kind(kind)
    if not isinstance(name, str):
        return False
    if kind == "architecture" and name.startswith(TIMM_PREFIX):
        return timm_model(name) is not None
    if _is_spec(name):
        eps = [ep for group_eps in _entry_points(kind).values() for ep in group_eps]
        return (name in BUILTINS[kind].values() or name in SAFE_BUILDERS.get(kind, ())
                or any(ep.value.strip() == name for ep in eps))
    return (name in BUILTINS[kind] or name in _torchvision_names(kind) or name in _entry_points(kind)
            or (kind == "architecture" and timm_model(name) is not None))


# --------------------------------------------------------------------------- the trust rule


def check(kind: str, spec: Any, origin: str | Path, *, trust: bool) -> str | None:
    """Apply the trust rule to a name or spec that the file ``origin`` gives; import nothing.

    Parameters
    ----------
    kind : str
        One of :data:`KINDS`.
    spec : str
        As the file gives it (``"resnet18"``, ``"pkg.mod:fn"``, ``"helper.py:make"``).
    origin : str or Path
        The file that names it.
    trust : bool
        The user agreed to run code named by this file.

    Returns
    -------
    str or None
        For a trusted spec that is not registered, the folder relative
        ``file.py`` paths resolve against (``origin``'s folder); else None.

    Raises
    ------
    TrustRequired
        ``spec`` names code (``":"``) that is not registered, and ``trust`` is
        False. Nothing was imported.
    ArchitectureError, DataError or ContributionError
        (by ``kind``) ``spec`` is not a string or is empty.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise _error(kind)(f"{origin}: the {kind} name must be a non-empty string, not {spec!r}")
    if ":" not in spec or is_registered(kind, spec):  # registered, or a plain name (unknown ones fail to resolve)
        return None
    if not trust:
        raise TrustRequired(origin, [spec], kind="code", roles={spec: kind})
    return str(Path(origin).expanduser().resolve().parent)


def resolve(kind: str, spec: str, *, origin: str | Path | None = None, trust: bool = False,
            base: str | Path | None = None) -> Callable[..., Any]:
    """The callable a name or spec of ``kind`` stands for, imported now.

    Parameters
    ----------
    kind : str
        One of :data:`KINDS`.
    spec : str
        A builtin or installed name (``"tiny_mlp"``), or ``"pkg.mod:callable"`` /
        ``"path/to/file.py:callable"`` (``callable`` may be dotted: ``Outer.Inner``).
    origin : str or Path, optional
        The file the spec was read from: the trust rule applies (:func:`check`).
        None: the user typed it (or the program made it), which is trust enough.
    trust : bool
        With ``origin``: the user agreed to run code this file names.
    base : str or Path, optional
        The folder a relative ``file.py`` path resolves against when ``origin``
        is None (e.g. one :func:`check` returned earlier); default the current folder.

    Returns
    -------
    callable
        For architectures, a torchvision name resolves to its builder with
        ``weights=None`` (and ``weights_backbone=None``) as defaults.

    Raises
    ------
    TrustRequired
        ``origin`` is given, ``spec`` is not registered and ``trust`` is False.
        Nothing was imported.
    ArchitectureError, DataError or ContributionError
        (by ``kind``) an unknown name (the message names the kind and the names
        available), a package or file that cannot be imported, a missing file,
        or something that is not callable.
    ValueError
        ``kind`` is not one of :data:`KINDS`.
    """
    _check_kind(kind)
    spec = canonical_spec(spec)
    if origin is not None:
        base = check(kind, spec, origin, trust=trust) or base
    elif not isinstance(spec, str) or not spec.strip():
        raise _error(kind)(f"the {kind} name must be a non-empty string, not {spec!r}")
    if spec in BUILTINS[kind]:
        return load_callable(BUILTINS[kind][spec], kind=kind)
    if spec in _torchvision_names(kind):
        return _torchvision_builder(spec)
    eps = _entry_points(kind).get(spec)
    if eps:
        return _load_entry_point(kind, spec, eps)
    timm_name = timm_model(spec) if kind == "architecture" else None
    if timm_name is not None:
        return _timm_builder(timm_name)
    if ":" in spec:
        return load_callable(spec, base, kind=kind)
    raise _error(kind)(_unknown(kind, spec))


def _unknown(kind: str, name: Any) -> str:
    listed = contributions(kind)
    tv = sum(c.source == "torchvision" for c in listed)
    timm = sum(c.name.startswith(TIMM_PREFIX) for c in listed)
    own = [c.name for c in listed if c.source != "torchvision" and not c.name.startswith(TIMM_PREFIX)]
    libraries = " and ".join(f"{n} {lib} models" for n, lib in ((tv, "torchvision"), (timm, "timm")) if n)
    near = difflib.get_close_matches(str(name), [c.name for c in listed], n=3)
    text = f"unknown {kind} {name!r}"
    text += f"; did you mean {', '.join(near)}?" if near else "."
    if own:
        text += f" Available: {', '.join(own)}"
        text += f" and {libraries} (workbench contributions {kind})." if libraries else "."
    elif libraries:
        text += f" Available: {libraries} (workbench contributions {kind})."
    else:
        text += f" None is registered (an installed package registers one under the entry-point group {group(kind)})."
    return text + " Or give a spec: package.module:callable or path/to/file.py:callable."


def _load_entry_point(kind: str, name: str, eps: list[EntryPoint]) -> Callable[..., Any]:
    if len({ep.value for ep in eps}) > 1:
        raise _error(kind)(f"{kind} {name!r} is registered by several packages ({', '.join(map(_source, eps))}): "
                           "uninstall all but one, or give the spec pkg.mod:callable you mean.")
    ep = eps[0]
    try:
        obj = ep.load()
    except Exception as exc:  # a broken package must not take the caller down
        raise _error(kind)(f"{kind} {name!r} from {_source(ep)} could not be imported "
                           f"({type(exc).__name__}: {exc}). Reinstall or update that package.") from exc
    if kind == "format" and not (callable(getattr(obj, "match", None)) and callable(getattr(obj, "read", None))):
        raise _error(kind)(f"format {name!r} from {_source(ep)} ({ep.value}) has no match and read functions.")
    if kind != "format" and not callable(obj):
        raise _error(kind)(f"{kind} {name!r} from {_source(ep)} ({ep.value}) is a {type(obj).__name__}, "
                           "not a callable.")
    return obj


def _torchvision_builder(name: str) -> Callable[..., Any]:
    import torchvision

    builder = torchvision.models.get_model_builder(name)

    def build(**kwargs: Any) -> Any:
        kwargs.setdefault("weights", None)
        if "weights_backbone" in inspect.signature(builder).parameters:  # detection: never download a backbone
            kwargs.setdefault("weights_backbone", None)
        return builder(**kwargs)

    return build


def _timm_builder(name: str) -> Callable[..., Any]:
    """``timm.create_model(name, pretrained=False, **kwargs)`` (timm imported when called)."""

    def build(**kwargs: Any) -> Any:
        import timm

        kwargs.setdefault("pretrained", False)
        return timm.create_model(name, **kwargs)

    build.__name__ = build.__qualname__ = f"timm_{re.sub(r'[^0-9A-Za-z_]', '_', name)}"
    build.__doc__ = f"timm.create_model({name!r}, pretrained=False, **kwargs)"
    return build


def load_callable(spec: str, base: str | Path | None = None, *, kind: str = "architecture") -> Callable[..., Any]:
    """Import ``"pkg.mod:callable"`` or ``"path/to/file.py:callable"`` and return the callable; no trust rule.

    Only for specs already past :func:`check` or typed by the user;
    :func:`resolve` is the entry for everything else. A file is imported as
    module ``_workbench_factory_<hash of its path>`` (so a training process can
    import it again under the same name); a file inside a package as a module
    of that package (:func:`file_module_name`, :func:`import_file_module`).

    Parameters
    ----------
    spec : str
        ``callable`` may be dotted (``Outer.Inner``).
    base : str or Path, optional
        The folder a relative file path starts from (default: the current folder).
    kind : str
        Chooses the error type and wording.

    Raises
    ------
    ArchitectureError, DataError or ContributionError
        (by ``kind``) malformed spec, file not found, import failure, not a callable.
    """
    error = _error(kind)
    target, _, attr = canonical_spec(spec).rpartition(":")
    if not target or not attr:
        raise error(f"{kind} spec {spec!r} must look like package.module:callable or path/file.py:callable.")
    warm_imports.claim()  # a factory's module may import transformers: never beside the window's imports ahead
    try:
        if target.endswith(".py") or "/" in target or "\\" in target:
            module = _import_file(spec, target, base, error)
        else:
            module = importlib.import_module(target)
        obj = module
        for part in attr.split("."):
            obj = getattr(obj, part)
    except WorkbenchError:
        raise
    except Exception as exc:
        raise error(f"{kind} spec {spec!r} could not be imported ({type(exc).__name__}: {exc}). "
                    "Check the module path and the callable's name.") from exc
    if not callable(obj):
        raise error(f"{kind} spec {spec!r} does not name a callable.")
    return obj


def _import_file(spec: str, target: str, base: str | Path | None, error: type[WorkbenchError]):
    path = Path(target).expanduser()
    path = (Path(base) / path if base and not path.is_absolute() else path).resolve()
    if not path.is_file():
        raise error(f"spec {spec!r}: file {path} not found.")
    return import_file_module(file_module_name(path), path)


def _package_root(path: Path) -> Path | None:
    """The top package folder of ``path`` when it imports relatively (``from .x import y``), else None.

    The top package is found by walking up while ``__init__.py`` exists. A file
    without relative imports is imported alone, as before (what a training
    process re-imports by path without its package).
    """
    if not _imports_relatively(path):
        return None
    root = None
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        root, folder = folder, folder.parent
    return root


def _imports_relatively(path: Path) -> bool:
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return False  # the import itself reports it
    return any(isinstance(node, ast.ImportFrom) and node.level for node in ast.walk(tree))


def _path_hash(path: Path) -> str:
    return hashlib.sha1(str(path).encode()).hexdigest()[:12]


def file_module_name(path: str | Path) -> str:
    """The module name a ``file.py:`` spec's file is imported as.

    ``_workbench_factory_<hash of the path>`` for a lone file; for a file in a
    package that imports relatively (``from .helpers import x``),
    ``_workbench_factory_<hash of the package folder>.sub.module``:
    the top package under a name of its own (no clash with an installed package
    of the same name, and a training process re-imports it by that name), its
    submodules by their own names, so relative imports work.
    """
    path = Path(path).resolve()
    root = _package_root(path)
    if root is None:
        return f"{FILE_MODULE_PREFIX}{_path_hash(path)}"
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join([f"{FILE_MODULE_PREFIX}{_path_hash(root)}", *parts])


def import_file_module(name: str, path: str | Path):
    """Import the file ``path`` as module ``name`` (from :func:`file_module_name`); already imported: that module.

    For a dotted ``name`` (a file inside a package) the top package is imported
    from its folder's ``__init__.py`` under ``name``'s first part, then
    ``name`` itself through the package (so ``from .helpers import x`` works).
    The package's parent folder is on ``sys.path`` during the import (for a
    package that imports itself by its own name) and taken off afterwards.
    A training process calls this with the names a pickled model refers to.

    Raises
    ------
    ImportError
        ``path`` is not a Python file; and whatever the file raises while it runs.
    """
    if name in sys.modules:
        return sys.modules[name]
    path = Path(path).resolve()
    top, _, rest = name.partition(".")
    if not rest and path.name != "__init__.py":
        return _exec_file(name, path)
    root = path.parent  # the top package's folder: a package itself (``pkg/__init__.py``) is its own top
    for _ in range(rest.count(".") + (path.name == "__init__.py") if rest else 0):
        root = root.parent
    parent = str(root.parent)
    sys.path.insert(0, parent)
    try:
        if top not in sys.modules:
            _exec_file(top, root / "__init__.py", package=root)
        return importlib.import_module(name)
    finally:
        try:
            sys.path.remove(parent)
        except ValueError:  # the file took it off itself
            pass


def _exec_file(name: str, path: Path, package: Path | None = None):
    locations = [str(package)] if package is not None else None
    module_spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=locations)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"cannot import {path} (not a Python file)")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


# --------------------------------------------------------------------------- keyword arguments from a file


def _is_plain(value: Any, depth: int = 0) -> bool:
    if depth > _MAX_DEPTH:
        return False
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v, depth + 1) for k, v in value.items())
    return False


def plain_kwargs(kwargs: Any, origin: str | Path, kind: str = "architecture") -> dict:
    """Keyword arguments read from a file, checked to be plain data.

    Parameters
    ----------
    kwargs : mapping or None
        As read from the file.
    origin : str or Path
        The file they come from (named in the error).
    kind : str
        What they are for (chooses the error type and wording).

    Returns
    -------
    dict
        A shallow copy (``{}`` for None).

    Raises
    ------
    ArchitectureError, DataError or ContributionError
        (by ``kind``) not a mapping of str keys, or a value that is not plain
        data (None, bool, int, float, str, and lists and str-keyed tables of
        those, nested at most 8 deep): a callable, a tensor, an object.
    """
    if kwargs is None:
        return {}
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise _error(kind)(f"{origin}: the {kind}'s kwargs must be a table of names to values, "
                           f"not {type(kwargs).__name__}")
    for key, value in kwargs.items():
        if not _is_plain(value):
            raise _error(kind)(
                f"{origin}: {kind} kwarg {key!r} is a {type(value).__name__}; a file may give only plain "
                "values (numbers, strings, lists and tables of those)")
    return dict(kwargs)


def plain_args(args: Any, origin: str | Path, kind: str = "architecture") -> tuple:
    """Positional arguments read from a file, checked to be plain data (as :func:`plain_kwargs`'s values).

    Returns
    -------
    tuple
        ``()`` for None.

    Raises
    ------
    ArchitectureError, DataError or ContributionError
        (by ``kind``) not a list, or an item that is not plain data.
    """
    if args is None:
        return ()
    if not isinstance(args, (list, tuple)):
        raise _error(kind)(f"{origin}: the {kind}'s args must be a list of values, not {type(args).__name__}")
    for index, value in enumerate(args):
        if not _is_plain(value):
            raise _error(kind)(f"{origin}: {kind} argument {index} is a {type(value).__name__}; a file may give "
                               "only plain values (numbers, strings, lists and tables of those)")
    return tuple(args)


def no_downloads(kwargs: Mapping[str, Any], origin: str | Path) -> None:
    """Refuse keyword arguments from a file that would make a registered architecture download weights.

    Applies to registered architectures only (torchvision's ``weights``,
    ``weights_backbone``, ``pretrained``..., and the same names for an installed
    package's): a trusted factory of the user's own gives these names whatever
    meaning it likes.

    Raises
    ------
    ArchitectureError
        One of those arguments is set to anything but None / False.
    """
    for key in _DOWNLOAD_KWARGS:
        value = kwargs.get(key)
        if value not in (None, False):
            raise ArchitectureError(
                f"{origin}: architecture kwarg {key}={value!r} would download weights; Workbench builds "
                "architectures with weights=None and loads the file's own tensors. Remove it from the file.")
