"""What module a state_dict loads into: registered architectures, factory specs, auto-detection.

Names resolve through the contributions registry (:mod:`workbench.core.contrib`):
Workbench's builtins, torchvision's builders, installed packages' entry points
(``workbench.architectures``), and ``pkg.mod:callable`` / ``file.py:callable`` specs.

Candidates are built on the ``meta`` device (shapes only, no memory, no random
init), so ranking all of torchvision takes seconds, and loading a 512 MB
checkpoint is ``load_state_dict(..., assign=True)`` on a meta-built module: no
random initialisation and no copy (the tensors of a memory-mapped checkpoint
become the parameters).
"""

from __future__ import annotations

import ast
import re
import threading
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from workbench.core import contrib
from workbench.core.model import arch_index
from workbench.core.errors import ArchitectureError
from workbench.core.model.checkpoint import Checkpoint, common_leading, strip_prefixes


#: torchvision names left out of auto-detection: quantized variants have the same keys
#: as their float models, optical flow models are not classifiers of any kind.
DETECTION_SKIP_PREFIXES = ("quantized_",)
_PLAIN_TYPES = (str, int, float, bool, type(None))
#: ``pkg.mod.callable``: Python's call syntax for a factory (``timm.create_model(...)``).
_DOTTED_CALL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")


# --------------------------------------------------------------------------- ArchSpec


@dataclass
class ArchSpec:
    """Names an architecture and its constructor keyword arguments.

    Attributes
    ----------
    name : str
        A torchvision model name (``"resnet18"``), a builtin (``"digits_cnn"``), an
        installed package's registered name (``workbench contributions``), or a
        factory spec ``"package.module:callable"`` / ``"path/to/file.py:callable"``.
    kwargs : dict
        Constructor keyword arguments, e.g. ``{"num_classes": 10}``. torchvision
        models are always built with ``weights=None`` (nothing is downloaded).
    base : str or None
        The folder a relative ``file.py:`` factory path resolves against: the
        folder of the file that named the spec (:meth:`from_file`); None: the
        current folder (a spec the user typed). Not saved by :meth:`to_dict`,
        which writes such paths absolute instead.
    args : tuple
        Positional arguments of a factory, plain values only:
        ``timm:create_model('resnet50d', num_classes=10)`` has
        ``args=("resnet50d",)``. Built as ``factory(*args, **kwargs)``.
    """

    name: str
    kwargs: dict = field(default_factory=dict)
    base: str | None = field(default=None, compare=False, repr=False)
    args: tuple = ()

    def with_kwargs(self, **extra: Any) -> ArchSpec:
        """A copy with ``extra`` added to :attr:`kwargs` (``args`` and ``base`` kept)."""
        return replace(self, kwargs={**self.kwargs, **extra})

    @property
    def factory_file(self) -> Path | None:
        """The absolute path of a ``file.py:callable`` spec's file (None for other specs)."""
        target, sep, _ = self.name.rpartition(":")
        if not sep or not (target.endswith(".py") or "/" in target or "\\" in target):
            return None
        path = Path(target).expanduser()
        if not path.is_absolute():
            path = Path(self.base or Path.cwd()) / path
        return path.resolve()

    def to_dict(self) -> dict:
        """``{"name": ..., "kwargs": {...}}`` (and ``"args": [...]`` when there are any) of plain values.

        Values are str/int/float/bool/None and lists of them.

        Raises
        ------
        ValueError
            A value is not such a plain value (it could not be saved in a
            weights-only checkpoint).
        """
        named = [(f"argument {i}", v) for i, v in enumerate(self.args)] + [(f"kwarg {k}", v) for k, v in self.kwargs.items()]
        for what, value in named:
            items = value if isinstance(value, (list, tuple)) else [value]
            if not all(isinstance(v, _PLAIN_TYPES) for v in items):
                raise ValueError(f"architecture {what}={value!r} is not a plain str/int/float/bool/None value")
        kwargs = {k: list(v) if isinstance(v, tuple) else v for k, v in self.kwargs.items()}
        file = self.factory_file  # absolute, so a run replays from any folder
        name = f"{file}:{self.name.rpartition(':')[2]}" if file is not None else self.name
        out: dict[str, Any] = {"name": name, "kwargs": kwargs}
        if self.args:
            out["args"] = [list(v) if isinstance(v, tuple) else v for v in self.args]
        return out

    @classmethod
    def from_dict(cls, d: Mapping) -> ArchSpec:
        """Inverse of :meth:`to_dict`, for a spec the user gave (no trust rule: see :meth:`from_file`)."""
        return cls(name=str(d["name"]), kwargs=dict(d.get("kwargs") or {}), args=tuple(d.get("args") or ()))

    @classmethod
    def from_file(cls, d: Mapping | str, origin: str | Path, *, trust: bool = False) -> ArchSpec:
        """A spec read from a file (a checkpoint's or safetensors header's ``arch``, a run.toml's ``[model]``).

        Applies the trust rule of the contributions registry
        (:mod:`workbench.core.contrib`): registered names (builtins, torchvision,
        installed packages' entry points) resolve as they are; any other ``pkg.mod:callable`` /
        ``file.py:callable`` needs ``trust``, and a relative file path then
        resolves against ``origin``'s folder. Nothing is imported here.

        Parameters
        ----------
        d : mapping or str
            ``{"name": ..., "kwargs": {...}}`` (``"args": [...]`` optional),
            ``"resnet18(num_classes=10)"`` or a timm training dict's ``"resnet50d"``.
        origin : str or Path
            The file that holds the spec.
        trust : bool
            The user agreed to run code this file names.

        Raises
        ------
        TrustRequired
            The spec names code that is not a registered contribution and
            ``trust`` is False.
        ArchitectureError
            A malformed entry, or kwargs that are not plain data.
        """
        if isinstance(d, str):
            spec = cls.parse(d)
            name, kwargs, args = spec.name, spec.kwargs, spec.args
        elif isinstance(d, Mapping) and "name" in d:
            name, kwargs, args = d["name"], d.get("kwargs"), d.get("args")
        else:
            raise ArchitectureError(f"{origin}: the architecture entry must name an architecture, not {d!r}")
        kwargs = contrib.plain_kwargs(kwargs, origin)
        args = contrib.plain_args(args, origin)
        base = contrib.check("architecture", name, origin, trust=trust)
        if base is None:  # a registered builder: a file never makes it download
            contrib.no_downloads(kwargs, origin)
        return cls(name=name, kwargs=kwargs, base=base, args=args)

    @classmethod
    def parse(cls, text: str, **kwargs: Any) -> ArchSpec:
        """Parse ``"resnet18"``, ``"resnet18(num_classes=10)"``, ``"my.mod:make(width=2)"`` or a factory call.

        Arguments in parentheses are Python literals, positional ones first
        (``"timm:create_model('resnet50d', num_classes=10)"``); ``kwargs``
        given here win. Python's own call syntax ``"timm.create_model('resnet50d')"``
        (a dotted name that is not a registered one, with parentheses) means
        the spec ``"timm:create_model"``: code, under the trust rule like any spec.

        Raises
        ------
        ArchitectureError
            Malformed text, or arguments that are not literals.
        """
        text = text.strip()
        parsed: dict[str, Any] = {}
        args: tuple = ()
        called = text.endswith(")") and "(" in text
        if called:
            head, rest = text.split("(", 1)
            try:
                call = ast.parse(f"f({rest}", mode="eval").body
                if not isinstance(call, ast.Call):
                    raise ValueError("not a call")
                if any(isinstance(a, ast.Starred) for a in call.args) or any(kw.arg is None for kw in call.keywords):
                    raise ValueError("no *args or **kwargs")
                args = tuple(ast.literal_eval(a) for a in call.args)
                parsed = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}
            except (SyntaxError, ValueError) as exc:
                raise ArchitectureError(
                    f"architecture {text!r}: cannot read its arguments ({exc}). Write e.g. resnet18(num_classes=10)."
                ) from exc
            text = head.strip()
        if not text:
            raise ArchitectureError("empty architecture name. Give a torchvision name such as resnet18 or a factory spec pkg.mod:fn.")
        if called and _DOTTED_CALL.fullmatch(text) and not contrib.is_registered("architecture", text):
            module, _, attr = text.rpartition(".")
            text = f"{module}:{attr}"
        if args and ":" not in text:
            raise ArchitectureError(f"architecture {text!r} takes keyword arguments only (e.g. {text}(num_classes=10)); "
                                    "positional arguments are for factory specs such as "
                                    "timm:create_model('resnet50d', num_classes=10).")
        return cls(name=text, kwargs={**parsed, **kwargs}, args=args)

    def __str__(self) -> str:
        args = ", ".join([repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()])
        return f"{self.name}({args})" if args else self.name


@dataclass
class Candidate:
    """One row of the auto-detected ranking.

    Attributes
    ----------
    spec : ArchSpec
        Includes an inferred ``num_classes`` when only the head's size differed.
    score : float
        0..1: matching (key, shape) pairs divided by the union of both key sets;
        1 means every key and shape matches.
    """

    spec: ArchSpec
    score: float


@dataclass
class LoadReport:
    """What happened when a state_dict was loaded into a module.

    Attributes
    ----------
    missing : list of str
        Module keys the checkpoint lacks.
    unexpected : list of str
        Checkpoint keys (after prefix stripping) the module lacks.
    mismatched : list of (str, tuple, tuple)
        ``(name, expected_shape, found_shape)``.
    stripped_prefixes : list of str
        E.g. ``["module."]``.
    strict : bool
        Whether the load was strict.
    loaded : int
        Number of tensors loaded.
    """

    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[tuple[str, tuple, tuple]] = field(default_factory=list)
    stripped_prefixes: list[str] = field(default_factory=list)
    strict: bool = True
    loaded: int = 0

    @property
    def ok(self) -> bool:
        """True when nothing is missing, unexpected or mismatched."""
        return not (self.missing or self.unexpected or self.mismatched)

    def summary(self, limit: int = 5) -> str:
        """A few lines naming up to ``limit`` keys of each problem kind, with shapes."""
        lines = []
        for title, items in (
            ("missing", self.missing),
            ("unexpected", self.unexpected),
            ("shape mismatch", [f"{n}: expected {tuple(e)}, found {tuple(f)}" for n, e, f in self.mismatched]),
        ):
            if items:
                more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
                lines.append(f"{len(items)} {title}: {', '.join(items[:limit])}{more}")
        return "; ".join(lines) if lines else "all keys and shapes match"


# --------------------------------------------------------------------------- building


class _MetaStorage(TorchFunctionMode):
    """Create parameters and buffers on ``meta`` but keep index arithmetic on CPU.

    ``with torch.device("meta")`` also moves ``torch.arange`` / ``torch.tensor``,
    which breaks models that compute layer widths with tensors (torchvision's
    RegNet calls ``.tolist()``) and leaves computed non-persistent buffers
    (e.g. relative position indices) without data. Only storage-allocating
    factories are redirected here.
    """

    FACTORIES = frozenset(
        {torch.empty, torch.empty_strided, torch.zeros, torch.ones, torch.full, torch.rand, torch.randn, torch.randint}
    )
    #: In-place initialisers that are no-ops on meta but cost Python decompositions.
    INITS = frozenset(
        [getattr(torch.nn.init, n) for n in dir(torch.nn.init) if n.endswith("_") and not n.startswith("_")]
        + [getattr(torch.Tensor, n) for n in ("uniform_", "normal_", "zero_", "fill_", "exponential_", "random_")]
    )

    def __init__(self, everything: bool = False):
        super().__init__()
        if everything:  # shapes only: index arithmetic on meta too (fast, but values are lost)
            from torch.utils._device import _device_constructors

            self.FACTORIES = frozenset(_device_constructors())

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.INITS or _is_value_inplace(func):  # nn.init passes the tensor by keyword
            target = args[0] if args else kwargs.get("tensor")
            if isinstance(target, torch.Tensor) and target.is_meta:
                return target
        if func in self.FACTORIES and kwargs.get("device") is None:
            kwargs["device"] = "meta"
        return func(*args, **kwargs)


#: In-place tensor methods that change a tensor's shape or flags, not only its values: never skipped.
_SHAPE_INPLACE = frozenset({"requires_grad_", "resize_", "resize_as_", "set_", "as_strided_", "squeeze_",
                            "unsqueeze_", "t_", "transpose_", "swapdims_", "swapaxes_", "share_memory_",
                            "detach_", "retain_grad", "rename_", "refine_names_"})


def _is_value_inplace(func: Any) -> bool:
    """True for an in-place tensor method that only writes values (``clamp_``, ``mul_``, ``erfinv_``...).

    On a meta tensor these are no-ops, but each costs a Python decomposition
    (timm's ``trunc_normal_`` calls four of them per weight): skipping them
    makes building timm models on ``meta`` several times faster.
    """
    name = getattr(func, "__name__", "")
    return (name.endswith("_") and not name.startswith("_") and name not in _SHAPE_INPLACE
            and getattr(func, "__objclass__", None) is torch._C.TensorBase)


def list_architectures() -> list[str]:
    """Every registered architecture name: builtins, installed packages' (sorted), torchvision's (sorted).

    From the contributions registry (:func:`workbench.core.contrib.names`); no
    contributing package is imported to list it.
    """
    return contrib.names("architecture")


def _as_spec(spec: ArchSpec | str | Mapping) -> ArchSpec:
    if isinstance(spec, ArchSpec):
        return spec
    if isinstance(spec, str):
        return ArchSpec.parse(spec)
    if isinstance(spec, Mapping):
        return ArchSpec.from_dict(spec)
    raise ArchitectureError(f"not an architecture spec: {spec!r}")


def build_module(
    spec: ArchSpec | str | Mapping, device: str | torch.device = "cpu", *, _shapes_only: bool = False
) -> nn.Module:
    """Build a model from its spec.

    Parameters
    ----------
    spec : ArchSpec, str or dict
        What to build (a string is parsed with :meth:`ArchSpec.parse`).
    device : str or torch.device
        ``"meta"`` builds shapes only (no memory, no random init; index buffers
        computed with ``torch.arange`` stay on CPU). Default ``"cpu"``.

    Returns
    -------
    nn.Module

    Raises
    ------
    ArchitectureError
        Unknown name, import failure, or the constructor failed (e.g. bad kwargs).
    """
    spec = _as_spec(spec)
    factory = contrib.resolve("architecture", spec.name, base=spec.base)  # a file's spec passed from_file already
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if str(device) == "meta":
                with _MetaStorage(everything=_shapes_only):
                    model = factory(*spec.args, **spec.kwargs)
            else:
                with torch.device(device):
                    model = factory(*spec.args, **spec.kwargs)
    except Exception as exc:
        raise ArchitectureError(f"could not build {spec}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, nn.Module):
        raise ArchitectureError(f"{spec} returned a {type(model).__name__}, not an nn.Module.")
    return model


# --------------------------------------------------------------------------- detection

Signature = dict[str, tuple[int, ...]]
_SIGNATURES: dict[str, Signature | None] = {}
_SIG_LOCK = threading.Lock()


def _signature(name: str, **kwargs: Any) -> Signature | None:
    """Key -> shape of a meta-built model; None when it cannot be built without arguments."""
    return _built_signature(name, **kwargs)[0]


def _built_signature(name: str, **kwargs: Any) -> tuple[Signature | None, str | None]:
    """(key -> shape, the module its class is defined in) of a meta-built model; (None, None) when it cannot be built."""
    spec = ArchSpec(name, dict(kwargs))
    try:
        model = build_module(spec, device="meta", _shapes_only=True)
    except ArchitectureError:  # e.g. RegNet computes widths with tensors: keep those on CPU
        try:
            model = build_module(spec, device="meta")
        except ArchitectureError:
            return None, None
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}, type(model).__module__


def candidate_builder(name: str) -> tuple[Signature | None, str | None]:
    """``(signature, the model's module)`` of the architecture ``name`` built on the meta device without
    arguments (``(None, None)`` when it cannot be): what the architecture index stores."""
    return _built_signature(name)


arch_index.use_builder(candidate_builder)


def candidate_signatures() -> dict[str, Signature]:
    """Signatures of every torchvision model and registered contribution, from the architecture index.

    Built once per library version into the user's cache folder
    (:mod:`workbench.core.model.arch_index`), then read in milliseconds; timm's
    models are indexed by family and compared only when a checkpoint's keys
    look like one (see :func:`detect_architecture`).
    """
    return arch_index.full_signatures()


def clear_signature_cache() -> None:
    """Forget signatures held in memory (benchmarks use it; the index files on disk stay)."""
    with _SIG_LOCK:
        _SIGNATURES.clear()
    arch_index.clear_memory()


def _infer_head(mismatched: list[tuple[tuple, tuple]]) -> int | None:
    """The checkpoint's class count when every mismatch is a head sized by num_classes.

    Each mismatched tensor must differ only in dim 0, and all dim-0 sizes must
    scale by one factor: a (1000, 512) fc -> (10, 512) gives 10; a detection
    head's (91, 1024) / (364, 1024) -> (11, 1024) / (44, 1024) gives 11.
    """
    if not mismatched:
        return None
    base = min(exp[0] for exp, _ in mismatched if exp)
    ratios = set()
    for exp, found in mismatched:
        if len(exp) != len(found) or not exp or exp[1:] != found[1:] or exp[0] % base:
            return None
        mult = exp[0] // base
        if found[0] % mult:
            return None
        ratios.add(found[0] // mult)
    return ratios.pop() if len(ratios) == 1 and next(iter(ratios)) > 0 else None


def _score(ckpt: Signature, cand: Signature) -> tuple[float, int | None]:
    """(score, inferred num_classes) of a checkpoint against one candidate."""
    common = ckpt.keys() & cand.keys()
    if not common:
        return 0.0, None
    union = len(ckpt.keys() | cand.keys())
    if len(common) / union < 0.3:  # cheap prefilter on the key sets
        return len(common) / union * 0.5, None
    bad = [(cand[k], ckpt[k]) for k in common if cand[k] != ckpt[k]]
    classes = _infer_head(bad) if len(bad) <= 6 else None
    matched = len(common) - (0 if classes else len(bad))
    return matched / union, classes


def _variants(state_dict: Mapping[str, torch.Tensor]) -> list[Signature]:
    """The checkpoint's signature with always-stripped prefixes removed, and without a common wrapper prefix."""
    stripped, _ = strip_prefixes(state_dict)
    sig = {k: tuple(v.shape) for k, v in stripped.items()}
    out = [sig]
    for prefix in common_leading(list(sig))[:2]:
        out.append({(k[len(prefix):] if k.startswith(prefix) else k): s for k, s in sig.items()})
    return out


def detect_architecture(state_dict: Mapping[str, torch.Tensor], top_k: int = 10) -> list[Candidate]:
    """Rank architectures by how well their keys and shapes match a state_dict.

    Parameters
    ----------
    state_dict : mapping of str to Tensor
        Checkpoint tensors; ``module.`` / ``_orig_mod.`` and a common wrapper
        prefix (``model.``) are tried away.
    top_k : int
        How many candidates to return.

    Returns
    -------
    list of Candidate
        Best first, score > 0 only. When only a classifier head's size differs the
        spec carries ``num_classes`` from the checkpoint and the score counts the
        head as matching (verified by rebuilding the candidate on ``meta``).

    Notes
    -----
    Candidates come from the architecture index
    (:func:`workbench.core.model.arch_index.candidates`): every torchvision
    model and registered contribution, and the timm families whose key names
    look most like the checkpoint's. Read from the user's cache folder in
    milliseconds; what is not indexed yet is built first (torchvision ~2 s,
    timm's family list ~4 s, a timm family 0.5-5 s; once per library version).
    Ranking itself is set arithmetic. A model whose signature equals a
    better-placed one's (timm's ``resnet18`` and torchvision's) is listed once,
    under the first source (contributions, torchvision, timm), and within timm
    under a model of the family its class is defined in
    (``vit_tiny_patch16_224``, not ``deit_tiny_patch16_224``: both build a
    ``vision_transformer.VisionTransformer``).
    """
    variants = _variants(state_dict)
    rows: list[tuple[float, tuple[int, int], str, int | None, Signature]] = []
    for entry in arch_index.candidates(variants):
        best = max((_score(v, entry.signature) for v in variants), key=lambda s: s[0])
        if best[0] > 0:
            rows.append((best[0], (entry.priority, not entry.home), entry.name, best[1], entry.signature))
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    kept: list[tuple[float, tuple[int, int], str, int | None, Signature]] = []
    for row in rows:
        if len(kept) >= max(top_k, 0):
            break
        if not any(k[0] == row[0] and k[4] == row[4] for k in kept):  # the same architecture under another name
            kept.append(row)
    out = []
    for score, priority, name, classes, _ in kept:
        spec = ArchSpec(name, {"num_classes": classes} if classes else {})
        if classes:
            score = _verify_head(variants, spec, score)
        out.append((Candidate(spec, round(score, 6)), priority))
    out.sort(key=lambda c: (-c[0].score, c[1], c[0].spec.name))
    return [c for c, _ in out]


def _verify_head(variants: list[Signature], spec: ArchSpec, score: float) -> float:
    sig = _signature(spec.name, **spec.kwargs)
    if sig is None:
        spec.kwargs.clear()
        return score * 0.9
    return max(_exact_score(v, sig) for v in variants)


def _exact_score(ckpt: Signature, cand: Signature) -> float:
    union = len(ckpt.keys() | cand.keys())
    return sum(1 for k in ckpt.keys() & cand.keys() if ckpt[k] == cand[k]) / union if union else 0.0


# --------------------------------------------------------------------------- loading


def _is_meta(t: torch.Tensor) -> bool:
    return t.device.type == "meta"


def _compare(module: nn.Module, state_dict: Mapping[str, torch.Tensor], stripped: list[str], strict: bool) -> tuple[LoadReport, dict]:
    own = module.state_dict(keep_vars=True)
    report = LoadReport(stripped_prefixes=stripped, strict=strict)
    usable = {}
    for key, value in state_dict.items():
        if key not in own:
            report.unexpected.append(key)
        elif tuple(own[key].shape) != tuple(value.shape):
            report.mismatched.append((key, tuple(own[key].shape), tuple(value.shape)))
        else:
            usable[key] = value
    # BatchNorm tolerates a missing num_batches_tracked (old checkpoints); so do we.
    report.missing = [k for k in own if k not in state_dict and not k.endswith("num_batches_tracked")]
    return report, usable


def _match_dtypes(module: nn.Module, usable: dict) -> dict:
    """Cast floating tensors to the module's dtype (assign=True would otherwise keep the file's dtype)."""
    own = module.state_dict(keep_vars=True)
    out = {}
    for key, value in usable.items():
        target = own[key].dtype
        out[key] = value.to(target) if value.dtype != target and value.is_floating_point() and target.is_floating_point else value
    return out


def load_state_dict_into(module: nn.Module, state_dict: Mapping[str, torch.Tensor], *, strict: bool = True) -> LoadReport:
    """Load a checkpoint's tensors into a module and report what fit.

    Prefixes are stripped against the module's own keys (:func:`strip_prefixes`).
    A module with tensors on ``meta`` is loaded with ``assign=True`` (the
    checkpoint's tensors become its parameters: no copy); others are copied into.

    Parameters
    ----------
    module : nn.Module
        The target (on CPU or meta).
    state_dict : mapping of str to Tensor
        The checkpoint's tensors.
    strict : bool
        True (default): any missing, unexpected or mismatched key raises and nothing
        is loaded. False: load every matching tensor and list the rest.

    Returns
    -------
    LoadReport

    Raises
    ------
    ArchitectureError
        ``strict`` and the keys or shapes differ (``.report`` holds the LoadReport).
    """
    ties = tied_groups(module)
    own_keys = list(module.state_dict(keep_vars=True))
    renamed, stripped = strip_prefixes(state_dict, own_keys)
    report, usable = _compare(module, renamed, stripped, strict)
    if strict and not report.ok:
        raise ArchitectureError(
            f"the checkpoint does not fit {type(module).__name__}: {report.summary()}. "
            "Choose the matching architecture (or its num_classes), or load partially (strict=False) "
            "to keep every tensor that fits.",
            report,
        )
    assign = any(_is_meta(t) for t in module.state_dict(keep_vars=True).values())
    usable = _match_dtypes(module, usable)
    module.load_state_dict(usable, strict=False, assign=assign)
    retie(module, ties)  # assign=True gives each alias its own tensor: tie them again
    report.loaded = len(usable)
    return report


def tied_groups(module: nn.Module) -> list[list[str]]:
    """Qualified names of each parameter held under several names (tied weights), canonical name first.

    E.g. ``[["embedding.weight", "decoder.weight"]]`` for a decoder sharing the
    embedding's weight; ``[]`` when nothing is tied.
    """
    by_id: dict[int, list[str]] = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(name)
    return [names for names in by_id.values() if len(names) > 1]


def retie(module: nn.Module, groups: list[list[str]]) -> None:
    """Make every name of each group (:func:`tied_groups`) hold the first name's parameter again."""
    for names in groups:
        first = module.get_parameter(names[0])
        for name in names[1:]:
            owner, _, attr = name.rpartition(".")
            module.get_submodule(owner)._parameters[attr] = first


def _materialize(module: nn.Module) -> list[str]:
    """Give every tensor still on ``meta`` real CPU memory; return their names.

    Modules with ``reset_parameters`` (Linear, Conv, BatchNorm...) are re-initialised
    their usual way and their loaded tensors put back; ``running_var`` gets ones,
    anything else zeros.
    """
    names = []
    for mod_name, sub in module.named_modules():
        own = {**dict(sub.named_parameters(recurse=False)), **dict(sub.named_buffers(recurse=False))}
        meta = [n for n, t in own.items() if t is not None and _is_meta(t)]
        if not meta:
            continue
        keep = {n: t for n, t in own.items() if t is not None and not _is_meta(t)}
        sub.to_empty(device="cpu", recurse=False)
        if hasattr(sub, "reset_parameters"):
            with torch.no_grad():
                sub.reset_parameters()
        else:
            for n in meta:
                with torch.no_grad():
                    getattr(sub, n).fill_(1.0 if n == "running_var" else 0.0)
        for n, t in keep.items():
            _set_tensor(sub, n, t)
        names += [f"{mod_name}.{n}" if mod_name else n for n in meta]
    return names


def _set_tensor(sub: nn.Module, name: str, tensor: torch.Tensor) -> None:
    if name in sub._parameters:
        sub._parameters[name] = tensor if isinstance(tensor, nn.Parameter) else nn.Parameter(tensor)
    else:
        sub._buffers[name] = tensor


def _ensure_parameters(module: nn.Module) -> None:
    """Make every parameter a real ``nn.Parameter`` with ``requires_grad=True`` (assign=True keeps the file's flag)."""
    for sub in module.modules():
        for name, p in list(sub._parameters.items()):
            if p is None:
                continue
            if not isinstance(p, nn.Parameter):
                sub._parameters[name] = nn.Parameter(p, requires_grad=p.is_floating_point() or p.is_complex())
            elif not p.requires_grad and (p.is_floating_point() or p.is_complex()):
                p.requires_grad_(True)


def _apply_frozen(module: nn.Module, frozen: Iterable[str]) -> None:
    frozen = set(frozen)
    for name, p in module.named_parameters():
        if name in frozen:
            p.requires_grad_(False)


def _has_computed_meta_buffers(model: nn.Module) -> bool:
    """True when a non-persistent buffer (not in state_dict) is on meta: its value cannot come from the file."""
    keys = set(model.state_dict(keep_vars=True))
    return any(_is_meta(b) for n, b in model.named_buffers() if n not in keys)


def load_model(
    checkpoint: Checkpoint, spec: ArchSpec | str | Mapping | None = None, *, strict: bool = True
) -> tuple[nn.Module, LoadReport]:
    """Build an architecture and load a checkpoint into it.

    Parameters
    ----------
    checkpoint : Checkpoint
        From :func:`~workbench.core.model.checkpoint.read_checkpoint`.
    spec : ArchSpec, str, dict or None
        The architecture. None uses the checkpoint's own module (pickled module /
        TorchScript) or the file's ``arch`` entry (:meth:`ArchSpec.from_file`:
        code that is not registered raises TrustRequired; pass the spec built
        with ``trust=True`` once the user agreed).
    strict : bool
        See :func:`load_state_dict_into`.

    Returns
    -------
    (nn.Module, LoadReport)
        The model on CPU. Its parameters are ``nn.Parameter`` with ``requires_grad``
        True except those named in the checkpoint's ``frozen`` entry. Tensors the
        checkpoint lacks (``strict=False``) are initialised the module's usual way.

    Raises
    ------
    ArchitectureError
        No architecture known, the spec cannot be built, or a strict load failed.
    """
    if spec is None and checkpoint.module is not None:
        model = checkpoint.module
        return model, LoadReport(strict=strict, loaded=len(checkpoint.state_dict))
    if spec is None and checkpoint.metadata.arch:  # read from the file: the trust rule applies
        spec = ArchSpec.from_file(checkpoint.metadata.arch, checkpoint.path)
    if spec is None:
        raise ArchitectureError(
            f"{checkpoint.path}: the file does not say which architecture it is for. "
            "Choose one (e.g. --arch resnet18) or use the detected ranking."
        )
    model = build_module(spec, device="meta")
    if _has_computed_meta_buffers(model):
        model = build_module(spec, device="cpu")
    ties = tied_groups(model)
    report = load_state_dict_into(model, checkpoint.state_dict, strict=strict)
    _materialize(model)
    _ensure_parameters(model)
    retie(model, ties)
    _apply_frozen(model, checkpoint.metadata.frozen)
    return model, report


# --------------------------------------------------------------------------- weights-only tree


class WeightsOnlyModule(nn.Module):
    """A node of the module tree rebuilt from dotted state_dict keys, without an architecture.

    It holds the checkpoint's tensors (floating ones as parameters, the rest and
    BatchNorm statistics as buffers) so structure, shapes and counts can be shown.
    """

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Always raises: there is no computation without an architecture.

        Raises
        ------
        ArchitectureError
        """
        raise ArchitectureError(
            "this is a weights-only tree: forward passes and training need an architecture. "
            "Choose one (a torchvision name or a factory spec) and load the checkpoint into it."
        )


_BUFFER_NAMES = ("running_mean", "running_var", "num_batches_tracked")


def _safe_name(name: str) -> str:
    """A usable attribute name: never empty, never shadowing an nn.Module attribute."""
    name = name or "_"
    while hasattr(WeightsOnlyModule, name):
        name += "_"
    return name


def weights_only_model(state_dict: Mapping[str, torch.Tensor]) -> nn.Module:
    """Build a :class:`WeightsOnlyModule` tree from dotted key names.

    ``"layer1.0.conv1.weight"`` becomes modules ``layer1`` -> ``0`` -> ``conv1``
    holding parameter ``weight`` (the same tensor, no copy). ``module.`` /
    ``_orig_mod.`` prefixes are stripped first.

    Parameters
    ----------
    state_dict : mapping of str to Tensor

    Returns
    -------
    WeightsOnlyModule
        The root; its ``forward`` raises ArchitectureError.
    """
    stripped, _ = strip_prefixes(state_dict)
    module_paths = {".".join(k.split(".")[:i]) for k in stripped for i in range(1, k.count(".") + 1)}
    root = WeightsOnlyModule()
    for key, tensor in stripped.items():
        parts = [_safe_name(p) for p in key.split(".")]
        node = root
        for part in parts[:-1]:
            child = node._modules.get(part)
            if child is None:
                child = WeightsOnlyModule()
                node.add_module(part, child)
            node = child
        leaf = parts[-1] + ("_tensor" if key in module_paths else "")
        if leaf in node._modules or leaf in node._parameters or leaf in node._buffers:
            leaf += "_"
        if tensor.is_floating_point() and leaf not in _BUFFER_NAMES:
            node.register_parameter(leaf, nn.Parameter(tensor, requires_grad=True))
        else:
            node.register_buffer(leaf, tensor)
    return root
