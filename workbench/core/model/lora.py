"""LoRA adapters as a freeze option, through the ``peft`` library (``pip install workbench[lora]``).

LoRA (Hu et al., 2021, "LoRA: Low-Rank Adaptation of Large Language Models",
https://arxiv.org/abs/2106.09685) freezes a layer's weight ``W`` (out, in) and
learns a low-rank update instead: the layer computes with

    W' = W + (alpha / r) * B @ A,    A: (r, in), B: (out, r)

where ``A`` starts random (Kaiming-uniform) and ``B`` at zero, so an adapted
model starts out computing exactly what the base model does. For an
``nn.Conv2d`` ``A`` is a conv with ``r`` output channels and ``B`` a 1x1 conv.

Everything here uses peft's own layers (``peft.LoraConfig`` +
``peft.inject_adapter_in_model``, the layers' ``merge()``,
``peft.get_peft_model_state_dict``); peft is imported only inside the functions
that need it, so ``import workbench`` works without it. Finding the adapted
modules of a model (:func:`lora_paths`) needs no peft: a peft LoRA layer is a
module with ``base_layer`` and ``lora_A`` children.
"""

from __future__ import annotations

import copy
import re
from collections import Counter
from pathlib import Path

import torch
from torch import nn

from workbench.core import warm_imports
from workbench.core.errors import WorkbenchError
from workbench.core.quoting import quoted

__all__ = ["ADAPTER_NAME", "LORA_TYPES", "head_paths", "is_lora_layer", "types_under", "lora_targets", "lora_edit", "add_lora", "remove_lora", "lora_paths", "max_rank",
           "merge_lora", "merged_copy", "adapter_config", "adapter_state_dict", "save_adapters"]

#: The name peft gives the adapter (``...query.lora_A.default.weight``).
ADAPTER_NAME = "default"
#: Module types LoRA can adapt, by class name: what the dialog offers as target types. An attention
#: block is adapted through its Linear projections (BERT's ``query`` / ``key`` / ``value``). peft's
#: ``nn.MultiheadAttention`` layer is left out: its forward merges the update into the base weights and
#: subtracts it again, so the base weights would not stay bit-identical.
LORA_TYPES = ("Linear", "Conv2d")
#: The files of peft's adapters-only format (``PeftModel.save_pretrained``).
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
#: peft's key prefix for a model wrapped in ``PeftModel`` (what ``PeftModel.from_pretrained`` expects).
_PEFT_PREFIX = "base_model.model."
#: Classes whose head is new for the task and trains beside the adapters (peft's ``modules_to_save`` of its
#: SEQ_CLS / TOKEN_CLS / QUESTION_ANS task types): a Hugging Face model whose class name ends so.
TASK_HEAD_SUFFIXES = ("ForSequenceClassification", "ForTokenClassification", "ForImageClassification",
                      "ForQuestionAnswering", "ForMultipleChoice")


def _peft():
    warm_imports.claim()  # peft imports transformers: never beside the window's imports ahead
    try:
        import peft
    except ImportError as exc:
        raise WorkbenchError("LoRA adapters need the peft library: pip install 'workbench[lora]'") from exc
    return peft


def is_lora_layer(module: nn.Module) -> bool:
    """True for a peft LoRA layer (a module wrapping ``base_layer`` with ``lora_A`` / ``lora_B``)."""
    return hasattr(module, "base_layer") and hasattr(module, "lora_A") and hasattr(module, "lora_B")


def lora_paths(model: nn.Module) -> list[str]:
    """Qualified names of the modules that carry LoRA adapters, in registration order (no peft needed).

    Only the outermost: peft's ``MultiheadAttention`` layer adapts its
    ``out_proj`` with a LoRA layer of its own, which belongs to it.
    """
    found: list[str] = []
    for name, m in model.named_modules():
        if is_lora_layer(m) and not _inside_lora(name, found):
            found.append(name)
    return found


def _inside_lora(path: str, adapted: list[str]) -> bool:
    return any(path == p or path.startswith(p + ".") for p in adapted)


def lora_targets(model: nn.Module, paths: list[str], types: tuple[str, ...] = ("Linear",),
                 names: tuple[str, ...] = ()) -> list[str]:
    """Expand selected modules into the exact qualified names LoRA will adapt.

    Parameters
    ----------
    model : nn.Module
    paths : list of str
        Selected modules. One of the ``types`` is taken as it is; a container
        (``bert.encoder.layer.0.attention``) stands for every module of the
        ``types`` below it. ``""`` is the whole model.
    types : tuple of str
        Class names from :data:`LORA_TYPES` (``"Linear"``, ``"Conv2d"``).
    names : tuple of str
        When given, keep only modules whose last name part is one of these
        (``("query", "value")``), as peft's ``target_modules`` does.

    Returns
    -------
    list of str
        Registration order, without duplicates; modules that already carry
        adapters (and their insides) are left out.

    Raises
    ------
    WorkbenchError
        An unknown type, a path the model does not have, or nothing to adapt.
    """
    unknown = [t for t in types if t not in LORA_TYPES]
    if unknown or not types:
        raise WorkbenchError(f"LoRA: unknown module type(s) {unknown or list(types)}; use {', '.join(LORA_TYPES)}.")
    for path in paths:
        try:
            model.get_submodule(path)
        except AttributeError as exc:
            raise WorkbenchError(f"LoRA: no module named {quoted(path)} in {type(model).__name__}.") from exc
    adapted = lora_paths(model)
    found = []
    for name, module in model.named_modules():
        if not any(name == p or not p or name.startswith(p + ".") for p in paths):
            continue
        if type(module).__name__ not in types or not isinstance(module, _torch_types(types)):
            continue
        if _inside_lora(name, adapted) or any(_inside_lora(name, [f]) for f in found):
            continue
        if names and name.rpartition(".")[2] not in names:
            continue
        found.append(name)
    if not found:
        what = " or ".join(types)
        raise WorkbenchError(f"LoRA: no {what} module without adapters under {', '.join(p or '(model)' for p in paths)}"
                             + (f" named {', '.join(names)}" if names else "") + ".")
    return found


def types_under(model: nn.Module, path: str) -> list[str]:
    """The :data:`LORA_TYPES` found at or below ``path`` outside existing adapters (what the dialog offers).

    Raises
    ------
    WorkbenchError
        No module named ``path``.
    """
    _module(model, path)
    adapted = lora_paths(model)
    found = {type(m).__name__ for name, m in model.named_modules()
             if (not path or name == path or name.startswith(path + "."))
             and isinstance(m, _torch_types(LORA_TYPES)) and not _inside_lora(name, adapted)}
    return [t for t in LORA_TYPES if t in found]


def _torch_types(types: tuple[str, ...]) -> tuple[type, ...]:
    return tuple(getattr(nn, t) for t in types)


def lora_edit(paths: list[str], r: int = 8, alpha: float = 16, dropout: float = 0.0) -> dict:
    """The ``[model] edits`` entry of an :func:`add_lora` (``{"op": "add_lora", "paths": [...], ...}``)."""
    alpha = int(alpha) if float(alpha).is_integer() else float(alpha)
    return {"op": "add_lora", "paths": list(paths), "r": int(r), "alpha": alpha, "dropout": float(dropout)}


def head_paths(model: nn.Module) -> list[str]:
    """The task head of a Hugging Face classifier: its top-level modules with parameters outside the base model.

    ``["classifier"]`` for a ``BertForSequenceClassification``, ``["score"]`` for a
    ``LlamaForSequenceClassification``; ``[]`` for a model whose class does not end in one of
    :data:`TASK_HEAD_SUFFIXES` (a causal LM's ``lm_head`` is the pretrained one and is not a task head).
    """
    prefix = getattr(model, "base_model_prefix", "")
    if not prefix or not type(model).__name__.endswith(TASK_HEAD_SUFFIXES):
        return []
    return [name for name, child in model.named_children()
            if name != prefix and any(True for _ in child.parameters())]


def add_lora(model: nn.Module, paths: list[str], r: int = 8, alpha: float = 16, dropout: float = 0.0) -> list[str]:
    """Put LoRA adapters on the modules named ``paths`` and freeze everything else but a classifier's task head.

    The adapted layer computes ``W x + (alpha / r) * B A dropout(x)`` (Hu et
    al., 2021); ``B`` starts at zero, so the model's output is unchanged until
    the adapters train. Afterwards only adapter parameters are trainable (peft's
    rule), and the task head of a Hugging Face classifier (:func:`head_paths`,
    peft's ``modules_to_save``), which is new for the task and must train; unfreeze
    another head with its checkbox to train it as well.

    Parameters
    ----------
    model : nn.Module
        Edited in place (each ``nn.Linear`` / ``nn.Conv2d`` at ``paths`` is replaced by peft's LoRA layer wrapping it as ``base_layer``).
    paths : list of str
        Exact qualified names (see :func:`lora_targets`).
    r : int
        Rank of ``A`` (r, in) and ``B`` (out, r), >= 1 and at most :func:`max_rank` of each module.
    alpha : float
        Scale numerator: the update is multiplied by ``alpha / r``; > 0.
    dropout : float
        Dropout probability on the adapter's input, in [0, 1).

    Returns
    -------
    list of str
        Qualified names of the parameters that were trainable before (to undo
        the freeze: :func:`remove_lora` with them).

    Raises
    ------
    WorkbenchError
        peft is not installed, bad numbers, a rank above a module's :func:`max_rank`
        (checked before anything is allocated), a path that does not exist, is not a
        type LoRA adapts (or is the ``out_proj`` of an ``nn.MultiheadAttention``),
        or already has adapters.
    """
    _check_numbers(r, alpha, dropout)
    paths = list(dict.fromkeys(paths))
    if not paths:
        raise WorkbenchError("LoRA: no modules chosen.")
    adapted = lora_paths(model)
    for path in paths:
        module = _module(model, path)
        if _inside_lora(path, adapted) or is_lora_layer(module):
            raise WorkbenchError(f"LoRA: {path} already has adapters.")
        if not isinstance(module, _torch_types(LORA_TYPES)):
            raise WorkbenchError(f"LoRA: {path} is a {type(module).__name__}; LoRA adapts "
                                 f"{', '.join(LORA_TYPES)} modules.")
        if _in_multihead_attention(model, path):
            raise WorkbenchError(f"LoRA: {path} belongs to an nn.MultiheadAttention, whose forward reads its "
                                 "weights directly: an adapter there would never run.")
        if r > max_rank(module):  # before peft allocates A (r, in) and B (out, r)
            raise WorkbenchError(f"LoRA: rank r = {r:,} is more than {path} ({_shape_text(module)}) can use: at most "
                                 f"{max_rank(module):,}, the smaller of its input and output sizes.")
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    peft = _peft()
    config = peft.LoraConfig(r=int(r), lora_alpha=float(alpha), lora_dropout=float(dropout), bias="none",
                             target_modules="|".join(f"(?:{re.escape(p)})" for p in paths))
    try:
        peft.inject_adapter_in_model(config, model, adapter_name=ADAPTER_NAME)
    except (ValueError, TypeError, RuntimeError) as exc:
        raise WorkbenchError(f"LoRA: peft could not adapt {', '.join(paths)}: {exc}") from exc
    _drop_peft_config(model)
    for head in head_paths(model):  # the task head trains beside the adapters (peft's modules_to_save)
        for p in model.get_submodule(head).parameters():
            p.requires_grad_(True)
    return trainable


def max_rank(module: nn.Module) -> int:
    """The largest LoRA rank that means anything for ``module``: ``min(in, out)`` of its weight as a matrix.

    ``B @ A`` is an ``(out, in)`` matrix: its rank is at most ``min(in, out)``, so a
    larger ``r`` adds parameters (``r * (in + out)``) and nothing else. The bound
    also caps what a recorded edit can make Workbench allocate: at most twice the
    layer's own weight (a checkpoint recording ``r = 20,000,000`` on a
    ``Linear(64, 10)`` once asked for 5 GB). For an ``nn.Conv2d`` ``in`` is
    ``in_channels * kernel height * kernel width``.
    """
    if isinstance(module, nn.Conv2d):
        kh, kw = module.kernel_size
        return max(1, min(module.in_channels * kh * kw, module.out_channels))
    return max(1, min(int(module.in_features), int(module.out_features)))


def _shape_text(module: nn.Module) -> str:
    if isinstance(module, nn.Conv2d):
        return f"Conv2d({module.in_channels}, {module.out_channels}, kernel_size={tuple(module.kernel_size)})"
    return f"{type(module).__name__}({module.in_features}, {module.out_features})"


def _in_multihead_attention(model: nn.Module, path: str) -> bool:
    parts = path.split(".")
    return any(isinstance(model.get_submodule(".".join(parts[:i])), nn.MultiheadAttention)
               for i in range(len(parts)))


def _check_numbers(r, alpha, dropout) -> None:
    if not isinstance(r, int) or isinstance(r, bool) or r < 1:
        raise WorkbenchError(f"LoRA: the rank r must be a whole number >= 1, not {r!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 0:
        raise WorkbenchError(f"LoRA: alpha must be a number > 0, not {alpha!r}")
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise WorkbenchError(f"LoRA: dropout must be a number in [0, 1), not {dropout!r}")


def _module(model: nn.Module, path: str) -> nn.Module:
    try:
        return model.get_submodule(path)
    except AttributeError as exc:
        raise WorkbenchError(f"LoRA: no module named {quoted(path)} in {type(model).__name__}.") from exc


def _drop_peft_config(model: nn.Module) -> None:
    """peft copies its config onto the model; the layers carry everything Workbench needs."""
    if "peft_config" in vars(model):
        del model.peft_config


def _set_module(model: nn.Module, path: str, new: nn.Module) -> None:
    parent, _, attr = path.rpartition(".")
    setattr(model.get_submodule(parent), attr, new)


def _unwrapped(layer: nn.Module, merge: bool) -> nn.Module:
    """The plain module under a LoRA layer, with the update merged into its weight when ``merge``."""
    unload = getattr(layer, "unload_and_optionally_merge_module", None)
    if callable(unload):  # MultiheadAttention: peft's own way back
        return unload(merge=merge, safe_merge=merge, adapter_names=None)
    if merge:
        layer.merge(safe_merge=True)
    return layer.get_base_layer()


def remove_lora(model: nn.Module, paths: list[str] | None = None, trainable: list[str] | None = None) -> None:
    """Take LoRA adapters off again: each adapted module goes back to the very module it wrapped.

    Parameters
    ----------
    model : nn.Module
        Edited in place. The base weights are the same tensors as before
        :func:`add_lora` (never merged), so they are bit-identical.
    paths : list of str, optional
        The adapted modules; default every one (:func:`lora_paths`).
    trainable : list of str, optional
        What :func:`add_lora` returned: exactly these parameters are trainable
        afterwards. None leaves ``requires_grad`` as it is.

    Raises
    ------
    WorkbenchError
        A path that carries no adapters.
    """
    for path in lora_paths(model) if paths is None else paths:
        layer = _module(model, path)
        if not is_lora_layer(layer):
            raise WorkbenchError(f"LoRA: {path} has no adapters to remove.")
        _set_module(model, path, _unwrapped(layer, merge=False))
    if trainable is not None:
        keep = set(trainable)
        for name, p in model.named_parameters():
            p.requires_grad_(name in keep)


def merge_lora(model: nn.Module) -> list[str]:
    """Fold every adapter into its base weight, in place: ``W <- W + (alpha / r) B A`` (Hu et al., 2021).

    Each LoRA layer is replaced by its base module with the merged weight (peft's
    ``merge(safe_merge=True)``), so the model has its original structure and
    ``state_dict`` keys again and computes what the adapted model computed.

    Returns
    -------
    list of str
        The modules that were merged.

    Raises
    ------
    WorkbenchError
        A merged weight is not finite (peft's safe merge refuses it).
    """
    merged = lora_paths(model)
    for path in merged:
        try:
            _set_module(model, path, _unwrapped(model.get_submodule(path), merge=True))
        except ValueError as exc:
            raise WorkbenchError(f"LoRA: could not merge the adapters of {path}: {exc}") from exc
    return merged


def merged_copy(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` with every adapter merged (:func:`merge_lora`); ``model`` is untouched."""
    clone = copy.deepcopy(model)
    merge_lora(clone)
    return clone


def _layer_numbers(layer: nn.Module) -> tuple[int, float, float]:
    drop = layer.lora_dropout[ADAPTER_NAME]
    return int(layer.r[ADAPTER_NAME]), float(layer.lora_alpha[ADAPTER_NAME]), float(getattr(drop, "p", 0.0))


def adapter_config(model: nn.Module, base: str | None = None):
    """The ``peft.LoraConfig`` that describes the model's adapters (per-module ranks in ``rank_pattern``).

    ``base_model_name_or_path`` is ``base``, else the model config's ``_name_or_path``.

    Raises
    ------
    WorkbenchError
        No adapters, or peft is not installed.
    """
    paths = lora_paths(model)
    if not paths:
        raise WorkbenchError("LoRA: the model has no adapters to save.")
    numbers = {p: _layer_numbers(model.get_submodule(p)) for p in paths}
    r, alpha, dropout = Counter(numbers.values()).most_common(1)[0][0]
    peft = _peft()
    name = type(model).__name__
    # peft's task types by the class's head (what PeftModel.from_pretrained / AutoPeftModel* read back)
    task_type = next((t for suffix, t in (("ForSequenceClassification", "SEQ_CLS"),
                                          ("ForTokenClassification", "TOKEN_CLS"), ("ForCausalLM", "CAUSAL_LM"),
                                          ("LMHeadModel", "CAUSAL_LM"), ("ForQuestionAnswering", "QUESTION_ANS"))
                      if name.endswith(suffix)), None)
    base = base or getattr(getattr(model, "config", None), "_name_or_path", "") or None
    return peft.LoraConfig(
        r=r, lora_alpha=alpha, lora_dropout=dropout, bias="none",
        target_modules="|".join(f"(?:{re.escape(p)})" for p in paths),
        modules_to_save=head_paths(model) or None, task_type=task_type, base_model_name_or_path=base,
        rank_pattern={f"^{re.escape(p)}$": n[0] for p, n in numbers.items() if n[0] != r},
        alpha_pattern={f"^{re.escape(p)}$": n[1] for p, n in numbers.items() if n[1] != alpha})


def adapter_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapters' tensors in peft's format: ``base_model.model.<path>.lora_A.weight`` -> (r, in) CPU tensor,
    and a classifier's task head whole (``base_model.model.classifier.weight``: peft's ``modules_to_save``).

    What ``PeftModel.save_pretrained`` writes and ``PeftModel.from_pretrained``
    loads (``peft.get_peft_model_state_dict`` drops the adapter name).
    """
    config = adapter_config(model)
    peft = _peft()
    model.peft_config = {ADAPTER_NAME: config}
    try:
        tensors = peft.get_peft_model_state_dict(model, adapter_name=ADAPTER_NAME)
    finally:
        _drop_peft_config(model)
    out = {_PEFT_PREFIX + k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}
    for head in head_paths(model):  # modules_to_save: stored whole, under their own names, as peft saves them
        for name, t in model.get_submodule(head).state_dict().items():
            out[f"{_PEFT_PREFIX}{head}.{name}"] = t.detach().cpu().contiguous().clone()
    return out


def save_adapters(model: nn.Module, folder: str | Path, base: str | None = None) -> Path:
    """Write only the adapters, in peft's format: ``folder/adapter_model.safetensors`` + ``adapter_config.json``.

    Load them back onto a fresh base model with
    ``peft.PeftModel.from_pretrained(base, folder)``.

    Parameters
    ----------
    model : nn.Module
        A model with adapters (:func:`add_lora`).
    folder : str or Path
        Created if needed; the two files in it are replaced.
    base : str, optional
        ``base_model_name_or_path`` (default: the model config's ``_name_or_path``).

    Returns
    -------
    Path
        The folder.

    Raises
    ------
    WorkbenchError
        No adapters, peft missing, or the folder cannot be written.
    """
    from safetensors.torch import save_file

    folder = Path(folder)
    tensors = adapter_state_dict(model)
    config = adapter_config(model, base)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(folder / ADAPTER_WEIGHTS), metadata={"format": "pt"})
        config.save_pretrained(str(folder))  # adapter_config.json
    except OSError as exc:
        raise WorkbenchError(f"LoRA: could not write the adapters to {folder}: {exc}") from exc
    return folder
