"""A fast architecture index: the key -> shape signature of every known architecture, cached on disk.

Ranking a state_dict against every architecture (:func:`~workbench.core.model.
detection.detect_architecture`) needs each candidate's state_dict keys and
shapes. Building them all on the ``meta`` device takes ~3 s for torchvision and
minutes for timm's ~1,300 models, so the signatures are built once per
installed library version and kept in :func:`index_dir` (under
:func:`workbench.core.contrib.cache_dir`), gzip-compressed JSON (data only,
never pickle):

* ``torchvision-<version>.json.gz`` and ``contrib-<digest>.json.gz``
  (Workbench's builtins and installed packages' entry points): every model's
  signature, built the first time they are needed (torchvision: ~2 s);
* ``timm-<version>/families.json.gz`` (tier 1): timm's model modules
  (``timm.list_modules()``: ``resnet``, ``vision_transformer``..., ~100
  families), the models of each, and the key *skeleton* (keys with their
  digits replaced: ``layer#.#.conv#.weight``) of one representative model per
  name stem of each family (``regnetv``, ``regnetx``, ``regnety`` in ``regnet``:
  191 for timm 1.0.31, about twice the models of one per family);
* ``timm-<version>/<family>.json.gz`` (tier 2): every model of one family,
  built when a query first picks that family (0.5-5 s each).

A query (:func:`candidates`) is two steps: a cheap key-name match (Jaccard
similarity of the checkpoint's key skeleton with each family's
representatives') picks the few best timm families, and only their models,
torchvision's and the registered contributions' are handed back to be
compared by shapes. A new library version gets files of its own; the others
stay valid. Each file is written atomically; a damaged one is rebuilt.

Thread-safe; builds run on the caller's thread (the window calls detection on
a worker), or in the background with :func:`start_background_build`.
``workbench index --rebuild`` rebuilds everything (:func:`rebuild`). Qt-free.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from workbench.core import contrib, versions
from workbench.core.files import atomic_write_bytes

__all__ = ["Entry", "Signature", "index_dir", "skeleton", "jaccard", "candidates", "pick_families",
           "timm_families", "family_signatures", "full_signatures", "rebuild", "start_background_build",
           "status", "clear_memory"]

Signature = dict[str, tuple[int, ...]]
#: ``progress(done, total, what)``: called as a build advances.
Progress = Callable[[int, int, str], None]

#: Bumped when the file layout changes: older files are then ignored and rebuilt.
FORMAT = 1
#: How many timm families a query expands, at most.
MAX_FAMILIES = 3
#: A family is expanded when its representative's skeleton similarity is at least this share of the best one's.
FAMILY_SHARE = 0.75
#: ... and at least this similarity.
FAMILY_FLOOR = 0.2
#: Name prefixes of torchvision models left out (quantized variants have their float models' keys).
SKIP_PREFIXES = ("quantized_",)
#: Source order: on an equal score the first source's model is listed first.
PRIORITY = {"contrib": 0, "torchvision": 1, "timm": 2}

_DIGITS = re.compile(r"\d+")
_STEM = re.compile(r"[A-Za-z]*")
_LOCK = threading.RLock()
_MEMO: dict[str, Any] = {}  # file path -> what it holds, for the process
_BACKGROUND: dict[str, threading.Thread] = {}


@dataclass(frozen=True)
class Entry:
    """One indexed architecture.

    Attributes
    ----------
    name : str
        Its registered name (``"resnet18"``, ``"timm/resnet50d"``, ``"digits_cnn"``).
    signature : dict of str to tuple of int
        state_dict key -> shape, as built with default arguments on ``meta``.
    priority : int
        Of its source (:data:`PRIORITY`): lower wins a tie.
    home : bool
        False for a timm model whose class is defined in another family's
        module (``deit_tiny_patch16_224`` builds a ``vision_transformer``
        model): on a tie the family's own model wins.
    """

    name: str
    signature: Signature
    priority: int
    home: bool = True


# --------------------------------------------------------------------------- small helpers


def index_dir() -> Path:
    """The folder of the index files: ``<cache_dir>/arch_index``."""
    return contrib.cache_dir() / "arch_index"


def skeleton(keys: Iterable[str]) -> frozenset[str]:
    """The keys with every run of digits replaced by ``#``: ``layer1.0.conv1.weight`` -> ``layer#.#.conv#.weight``."""
    return frozenset(_DIGITS.sub("#", k) for k in keys)


def jaccard(a: frozenset | set, b: frozenset | set) -> float:
    """``|a & b| / |a | b|`` (0 for two empty sets)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def _safe(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z_.+-]", "_", text)


def _encode(sig: Signature | None, module: str | None = None) -> list | None:
    return None if sig is None else [list(sig), [list(s) for s in sig.values()], module or ""]


def _decode(item: Any) -> Signature | None:
    if item is None:
        return None
    keys, shapes = item[0], item[1]
    return {k: tuple(s) for k, s in zip(keys, shapes)}


def _home(item: Any, family: str) -> bool:
    """True when the model's class is defined in ``family``'s own module (``timm.models.<family>``)."""
    module = item[2] if len(item) > 2 else ""
    return not module or module.rsplit(".", 1)[-1] == family


def _read(path: Path) -> dict | None:
    """A file's content (memoised), or None when it is missing, damaged or of another format."""
    key = str(path)
    if key in _MEMO:
        return _MEMO[key]
    try:
        data = json.loads(gzip.decompress(path.read_bytes()))
    except (OSError, ValueError, EOFError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    _MEMO[key] = data
    return data


def _write(path: Path, data: dict) -> dict:
    data = {"format": FORMAT, **data}
    try:
        atomic_write_bytes(path, gzip.compress(json.dumps(data, separators=(",", ":")).encode(), 6))
    except OSError:  # a read-only cache: keep it in memory
        pass
    _MEMO[str(path)] = data
    return data


#: ``builder(name) -> (signature or None, the model's module or None)``: how a named architecture is built on
#: the meta device. Registered by :mod:`workbench.core.model.detection` (which builds candidates with ``build_module``) when it
#: is imported, so that the two modules do not import each other; every caller of this index goes through it.
_BUILDER: Callable[[str], tuple[Signature | None, str | None]] | None = None


def use_builder(builder: Callable[[str], tuple[Signature | None, str | None]]) -> None:
    """Set how an architecture's signature is built (:mod:`workbench.core.model.detection` does, on import)."""
    global _BUILDER
    _BUILDER = builder


def _build(name: str) -> tuple[Signature | None, str | None]:
    if _BUILDER is None:
        raise RuntimeError("import workbench.core.model.detection first: it registers the signature builder")
    return _BUILDER(name)


def _build_all(names: list[str], progress: Progress | None, label: str) -> dict[str, list | None]:
    out = {}
    for i, name in enumerate(names):
        if progress is not None:
            progress(i, len(names), f"{label} {name}")
        out[name] = _encode(*_build(name))
    if progress is not None:
        progress(len(names), len(names), label)
    return out


def clear_memory() -> None:
    """Forget what was read from the index files in this process (the files stay)."""
    with _LOCK:
        _MEMO.clear()


# --------------------------------------------------------------------------- sources built whole


def _torchvision_file() -> Path | None:
    ver = versions.library_version("torchvision")
    return index_dir() / f"torchvision-{_safe(ver)}.json.gz" if ver else None


def _contrib_names() -> list[str]:
    return [c.name for c in contrib.own_contributions("architecture")]


def _contrib_file() -> Path:
    """Named by a digest of Workbench's version and the registered names and targets (a plugin update rebuilds it).

    Read from package metadata: neither torchvision nor a plugin is imported.
    """
    rows = [(c.name, c.target, c.source) for c in contrib.own_contributions("architecture")]
    digest = hashlib.sha1(json.dumps([versions.library_version("workbench"), rows]).encode()).hexdigest()[:12]
    return index_dir() / f"contrib-{digest}.json.gz"


def _whole(path: Path, names: Callable[[], list[str]], label: str, progress: Progress | None,
           rebuild: bool = False) -> dict[str, Signature]:
    """The signatures a file holds (decoded once per process), built and written first when it is missing."""
    entries = _whole_entries(path, names, label, progress, rebuild, "", PRIORITY["contrib"])
    return {e.name: e.signature for e in entries}


def _whole_entries(path: Path, names: Callable[[], list[str]], label: str, progress: Progress | None,
                   rebuild: bool, family: str, priority: int) -> list[Entry]:
    """The entries a file holds (decoded once per process), built and written first when it is missing."""
    decoded = f"{path}#decoded"
    with _LOCK:
        if not rebuild and decoded in _MEMO:
            return _MEMO[decoded]
        data = None if rebuild else _read(path)
        for attempt in range(2):
            if data is None:
                data = _write(path, {"models": _build_all(names(), progress, label)})
            try:
                entries = [Entry(n, s, priority, not family or _home(item, family))
                           for n, item in data["models"].items() if (s := _decode(item)) is not None]
                break
            except (TypeError, ValueError, KeyError, AttributeError, IndexError):  # damaged content: build again
                data = None
        _MEMO[decoded] = entries
        return entries


def _full_entries(progress: Progress | None) -> list[Entry]:
    out = []
    tv = _torchvision_file()
    if tv is not None:
        out += _whole_entries(tv, _torchvision_list, "torchvision", progress, False, "", PRIORITY["torchvision"])
    out += _whole_entries(_contrib_file(), _contrib_names, "contributions", progress, False, "", PRIORITY["contrib"])
    return out


def full_signatures(progress: Progress | None = None) -> dict[str, Signature]:
    """Signatures of every torchvision model and registered contribution (built once per version, then read)."""
    return {e.name: e.signature for e in _full_entries(progress)}


def _torchvision_list() -> list[str]:
    import torchvision

    return [n for n in sorted(torchvision.models.list_models()) if not n.startswith(SKIP_PREFIXES)]


# --------------------------------------------------------------------------- timm, in two tiers


def _timm_folder() -> Path | None:
    ver = versions.library_version("timm")
    return index_dir() / f"timm-{_safe(ver)}" if ver and contrib.timm_names() else None


def _representative(models: list[str]) -> str:
    return min(models, key=lambda n: (len(n), n))


def _stem(name: str) -> str:
    """A timm model name's leading letters: ``regnety_002`` -> ``regnety``, ``resnet50d`` -> ``resnet``."""
    return _STEM.match(name).group(0) or name


def timm_families(progress: Progress | None = None, *, rebuild: bool = False) -> dict[str, dict]:
    """Tier 1: ``{family: {"models": ["timm/<name>", ...], "rep": name, "skeletons": [[...], ...]}}``; {} without timm.

    A family (a module of ``timm.models``) gets one key skeleton per name stem
    (:func:`_stem`): ``timm.models.regnet`` holds ``regnetv`` (pre-activation),
    ``regnetx`` and ``regnety`` (squeeze-excitation) models whose keys differ,
    and one representative alone missed the others. Read from
    ``families.json.gz``; built when missing or written by an older version
    (imports timm and builds one model per stem on ``meta``).
    """
    folder = _timm_folder()
    if folder is None:
        return {}
    path = folder / "families.json.gz"
    with _LOCK:
        data = None if rebuild else _read(path)
        if data is None or any("skeletons" not in f for f in data.get("families", {}).values()):
            data = _write(path, {"families": _build_families(progress)})
        return data["families"]


def _build_families(progress: Progress | None) -> dict[str, dict]:
    import timm

    families = {}
    modules = sorted(timm.list_modules())
    for i, module in enumerate(modules):
        models = sorted(timm.list_models(module=module))
        if not models:
            continue
        if progress is not None:
            progress(i, len(modules), f"timm families: {module}")
        stems: dict[str, list[str]] = {}
        for name in models:
            stems.setdefault(_stem(name), []).append(name)
        sigs = [_build(contrib.TIMM_PREFIX + _representative(group))[0] for group in stems.values()]
        families[module] = {"models": [contrib.TIMM_PREFIX + m for m in models],
                            "rep": contrib.TIMM_PREFIX + _representative(models),
                            "skeletons": [sorted(skeleton(sig)) for sig in sigs if sig]}
    if progress is not None:
        progress(len(modules), len(modules), "timm families")
    return families


def family_signatures(family: str, progress: Progress | None = None, *, rebuild: bool = False) -> dict[str, Signature]:
    """Tier 2: the signature of every timm model of ``family`` (built once, then read); {} for no such family."""
    return {e.name: e.signature for e in _family_entries(family, progress, rebuild)}


def _family_entries(family: str, progress: Progress | None = None, rebuild: bool = False) -> list[Entry]:
    families = timm_families()
    folder = _timm_folder()
    if family not in families or folder is None:
        return []
    return _whole_entries(folder / f"{_safe(family)}.json.gz", lambda: families[family]["models"],
                          f"timm {family}", progress, rebuild, family, PRIORITY["timm"])


def pick_families(variants: list[Signature], families: dict[str, dict] | None = None,
                  limit: int = MAX_FAMILIES) -> list[tuple[str, float]]:
    """The timm families whose representatives' key skeletons are most like the checkpoint's, best first.

    Parameters
    ----------
    variants : list of Signature
        The checkpoint's signature and its prefix-stripped variants.
    families : dict, optional
        :func:`timm_families` (read when None).
    limit : int
        At most this many families.

    Returns
    -------
    list of (family, similarity)
        Similarity is the best Jaccard index of the checkpoint's skeleton
        with one of the family's (0..1). Kept:
        at least :data:`FAMILY_FLOOR` and :data:`FAMILY_SHARE` of the best.
    """
    families = timm_families() if families is None else families
    skeletons = [skeleton(v) for v in variants]
    rows = []
    for family, info in families.items():
        reps = [frozenset(s) for s in info.get("skeletons") or () if s]
        if reps:
            rows.append((family, max(jaccard(s, rep) for s in skeletons for rep in reps)))
    rows.sort(key=lambda r: (-r[1], r[0]))
    best = rows[0][1] if rows else 0.0
    return [(f, s) for f, s in rows[:limit] if s >= FAMILY_FLOOR and s >= FAMILY_SHARE * best]


# --------------------------------------------------------------------------- queries


def candidates(variants: list[Signature], *, limit: int = MAX_FAMILIES, progress: Progress | None = None) -> list[Entry]:
    """The architectures worth comparing by shapes with a checkpoint.

    Every torchvision model and registered contribution, and the models of the
    timm families :func:`pick_families` chooses. What is not on disk yet is
    built now (on the calling thread: call it from a worker).

    Parameters
    ----------
    variants : list of Signature
        The checkpoint's key -> shape signature and its prefix-stripped variants.
    limit : int
        At most this many timm families.
    progress : callable, optional
        ``progress(done, total, what)`` while something is built.

    Returns
    -------
    list of Entry
    """
    out = _full_entries(progress)
    for family, _ in pick_families(variants, timm_families(progress), limit):
        out += _family_entries(family, progress)
    return out


def rebuild(progress: Progress | None = None, *, timm_all: bool = True) -> dict[str, int]:
    """Build the whole index again: torchvision, the contributions, timm's families and (``timm_all``) every timm model.

    Returns
    -------
    dict
        ``{"torchvision": n, "contributions": n, "timm": n}``: models indexed.
    """
    with _LOCK:
        clear_memory()
        counts = {"torchvision": 0, "contributions": 0, "timm": 0}
        tv = _torchvision_file()
        if tv is not None:
            counts["torchvision"] = len(_whole(tv, _torchvision_list, "torchvision", progress, rebuild=True))
        counts["contributions"] = len(_whole(_contrib_file(), _contrib_names, "contributions", progress, rebuild=True))
        families = timm_families(progress, rebuild=True)
        if timm_all:
            for family in families:
                counts["timm"] += len(family_signatures(family, progress, rebuild=True))
        return counts


def start_background_build(progress: Progress | None = None) -> threading.Thread:
    """Build what the first query needs (torchvision, contributions, timm's families) on a daemon thread.

    One thread per process: a second call returns the running (or finished)
    one. Errors end the thread quietly: a query later builds what is missing
    and reports its own errors.
    """
    with _LOCK:
        thread = _BACKGROUND.get("warm")
        if thread is not None:
            return thread

        def work() -> None:
            try:
                full_signatures(progress)
                timm_families(progress)
            except Exception:  # noqa: BLE001 - best effort; the query reports
                pass

        thread = threading.Thread(target=work, name="arch-index", daemon=True)
        _BACKGROUND["warm"] = thread
        thread.start()
        return thread


def status() -> dict[str, Any]:
    """What is on disk: ``{"folder", "torchvision", "contributions", "timm", "timm_families", "timm_built", "bytes"}``."""
    folder = index_dir()
    tv = _torchvision_file()
    timm_folder = _timm_folder()
    families = _read(timm_folder / "families.json.gz") if timm_folder else None
    built = sorted(p.name[: -len(".json.gz")] for p in timm_folder.glob("*.json.gz")) if timm_folder and \
        timm_folder.is_dir() else []
    size = sum(p.stat().st_size for p in folder.rglob("*.json.gz")) if folder.is_dir() else 0
    return {"folder": str(folder), "torchvision": bool(tv and tv.is_file()),
            "contributions": _contrib_file().is_file(), "timm": versions.library_version("timm"),
            "timm_families": len(families["families"]) if families else 0,
            "timm_built": len([b for b in built if b != "families"]), "bytes": size}
