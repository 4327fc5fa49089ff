"""Which architecture a state_dict is for: a ranking of candidates by keys and shapes.

Candidates come from the architecture index (:mod:`workbench.core.model.arch_index`),
whose entries this module builds on the ``meta`` device
(:func:`candidate_builder`, registered with the index on import).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch

from workbench.core.errors import ArchitectureError
from workbench.core.model import arch_index
from workbench.core.model.prefixes import common_leading, strip_prefixes
from workbench.core.model.meta_build import build_module
from workbench.core.model.spec import ArchSpec


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



Signature = dict[str, tuple[int, ...]]


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


def infer_num_classes(spec: ArchSpec, state_dict: Mapping[str, torch.Tensor]) -> ArchSpec:
    """``spec`` with the ``num_classes`` its checkpoint's head has, when the file named the model but not its head.

    A timm training dict (timm's ``train.py``) records ``"arch": "efficientnet_lite0"``
    and nothing of its head: a model trained with ``--num-classes 10`` has a
    ``(10, 1280)`` classifier that timm's default build (1000 classes) does not
    take. Like the detected ranking does for torchvision
    (:func:`detect_architecture`), the head's size in the state_dict gives
    ``num_classes``: the spec is built on the ``meta`` device (no memory, no
    weights) and compared key by key; when only tensors sized by the class count
    differ (:func:`_infer_head`), and the spec rebuilt with that count takes
    every tensor, that spec is returned.

    Only timm specs (``timm/<name>``, from a plain-string ``arch`` entry)
    without ``num_classes`` are considered; any other spec, or a head that does
    not explain every difference, is returned as it is (the strict load then
    says what does not fit).

    Parameters
    ----------
    spec : ArchSpec
    state_dict : mapping of str to Tensor

    Returns
    -------
    ArchSpec
    """
    from workbench.core.contrib import TIMM_PREFIX

    if not spec.name.startswith(TIMM_PREFIX) or "num_classes" in spec.kwargs:
        return spec
    own = _signature(spec.name, **spec.kwargs)
    if own is None:
        return spec
    best: int | None = None
    for variant in _variants(state_dict):
        if variant.keys() != own.keys():
            continue
        bad = [(own[k], variant[k]) for k in own if own[k] != variant[k]]
        best = _infer_head(bad) if bad and len(bad) <= 6 else None
        if best is not None:
            break
    if best is None:
        return spec
    inferred = spec.with_kwargs(num_classes=best)
    sig = _signature(inferred.name, **inferred.kwargs)
    ok = sig is not None and any(v == sig for v in _variants(state_dict))
    return inferred if ok else spec
