"""The task a model was built for, and the model a text task trains: from a model folder, with the head it needs.

:func:`propose_task` reads what a model is for from its class (and a Hugging
Face config's ``architectures``): ``*ForSequenceClassification`` is text
classification, ``*ForCausalLM`` / ``*LMHeadModel`` a causal language model,
``*ForTokenClassification`` token classification, ``*ForImageClassification``
image classification (``image_classification``: the folder's image processor on an
ImageFolder), timm / torchvision classifiers the ``classification`` kind; a bare
vision encoder (``ViTModel``) image classification with a head to add; a bare encoder (``BertModel``) proposes text classification with a head
to add, a bare decoder (``LlamaModel``) a causal language model with its LM head
to add. The window's Task section and the Training dock follow it.

:func:`model_for_task` builds the model of a run file whose ``[task] kind`` is
``text_classification``, ``token_classification``, ``causal_lm`` or ``image_classification`` and whose
``[model] checkpoint`` is a model folder: the folder is opened by the one open policy
(:func:`~workbench.core.model.opening.open_model`), and when the task needs
another head (a bare encoder, a classifier with a head of another size) the
transformers class with that head is built from the folder's config
(``num_labels``, ``id2label``, ``label2id`` from the data's classes) and the
folder's weights go into it (the encoder's keys aligned by transformers' own
``base_model_prefix`` handling; the new head initialized as transformers does).
Offline, local files only, no remote code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from torch import nn

from workbench.core.errors import TrainingError
from workbench.core.train.config import HF_KINDS, TrainConfig

__all__ = ["LABELLED_KINDS", "TaskProposal", "propose_task", "head_class", "model_for_task", "align_frozen",
           "add_task_head"]

#: The text kinds whose head is sized to the data's classes (``num_labels``, ``id2label``, ``label2id``).
LABELLED_KINDS = ("text_classification", "token_classification", "image_classification")
#: Display text of each kind a model may propose.
KIND_TITLES = {"text_classification": "Text classification", "causal_lm": "Causal language model",
               "token_classification": "Token classification", "classification": "Image classification",
               "image_classification": "Image classification"}


@dataclass
class TaskProposal:
    """What a model was built for.

    Attributes
    ----------
    kind : str
        A ``[task] kind`` (``"text_classification"``, ``"causal_lm"``,
        ``"token_classification"``, ``"image_classification"``, ``"classification"``), or ``""`` when the model does not say.
    title : str
        What the window shows (``"Text classification"``).
    head : str
        ``"present"`` (the model has the task's head) or ``"add"`` (a bare encoder or
        decoder: :func:`model_for_task` adds it; the tree should say so).
    head_class : str
        The transformers class that has the head (``"BertForSequenceClassification"``); ``""`` otherwise.
    dataset : str
        The ``[data] dataset`` that fits (``"text"``, ``"imagefolder"``), ``""`` when unknown.
    note : str
        One line for the user (``"BertModel has no classification head: one sized to your classes is added"``).
    """

    kind: str
    title: str = ""
    head: str = "present"
    head_class: str = ""
    dataset: str = ""
    note: str = ""


def _transformers():
    try:
        import transformers
    except ImportError:
        return None
    return transformers


def _is_hf(model: nn.Module) -> bool:
    transformers = _transformers()
    return transformers is not None and isinstance(model, transformers.PreTrainedModel)


def head_class(model_or_config: Any, kind: str) -> str:
    """The transformers class of the config's model type with the head of ``kind`` (``""`` when none).

    ``"text_classification"``: ``AutoModelForSequenceClassification``'s class;
    ``"causal_lm"``: ``AutoModelForCausalLM``'s; ``"token_classification"``:
    ``AutoModelForTokenClassification``'s; ``"image_classification"``: ``AutoModelForImageClassification``'s.
    """
    transformers = _transformers()
    config = getattr(model_or_config, "config", model_or_config)
    auto = {"text_classification": "AutoModelForSequenceClassification", "causal_lm": "AutoModelForCausalLM",
            "token_classification": "AutoModelForTokenClassification",
            "image_classification": "AutoModelForImageClassification"}.get(kind)
    if transformers is None or auto is None:
        return ""
    try:
        return getattr(transformers, auto)._model_mapping[type(config)].__name__
    except (KeyError, AttributeError, ValueError):
        return ""


def _mapped(transformers: Any, mapping: str, config: Any) -> bool:
    try:
        return type(config) in getattr(transformers, mapping)
    except (AttributeError, TypeError, ValueError):
        return False


def propose_task(model: nn.Module, opened: Any = None) -> TaskProposal:
    """The task ``model`` was built for, from its class (and ``architectures`` of a folder's config).

    Parameters
    ----------
    model : nn.Module
        A transformers model, a timm or torchvision classifier, or anything else.
    opened : Opened, optional
        What :func:`~workbench.core.model.opening.open_model` returned (its config's ``architectures``
        names the class when the model is a weights-only tree).

    Returns
    -------
    TaskProposal
        ``kind == ""`` when the model does not say (the run's ``auto`` then applies).
    """
    names = [type(model).__name__]
    extra = getattr(getattr(getattr(opened, "checkpoint", None), "metadata", None), "extra", None)
    cfg = extra.get("config") if isinstance(extra, dict) else None
    if isinstance(cfg, dict) and isinstance(cfg.get("architectures"), list):
        names += [str(n) for n in cfg["architectures"]]
    for name in names:
        for suffix, kind, dataset in (("ForSequenceClassification", "text_classification", "text"),
                                      ("ForCausalLM", "causal_lm", "text"), ("LMHeadModel", "causal_lm", "text"),
                                      ("ForTokenClassification", "token_classification", "text"),
                                      ("ForImageClassification", "image_classification", "imagefolder")):
            if name.endswith(suffix):
                return TaskProposal(kind, KIND_TITLES[kind], "present", name, dataset)
    if _is_hf(model):
        transformers = _transformers()
        config = model.config
        if getattr(config, "is_encoder_decoder", False):
            return TaskProposal("", note=f"{names[0]} is an encoder-decoder model; Workbench has no task for it yet")
        if _mapped(transformers, "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING", config) and \
                not _mapped(transformers, "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING", config):
            cls = head_class(config, "image_classification")
            return TaskProposal("image_classification", KIND_TITLES["image_classification"], "add", cls, "imagefolder",
                                f"{names[0]} has no head: training adds a classification head sized to your "
                                f"classes ({cls})")
        causal = _mapped(transformers, "MODEL_FOR_CAUSAL_LM_MAPPING", config) and \
            not _mapped(transformers, "MODEL_FOR_MASKED_LM_MAPPING", config)
        kind = "causal_lm" if causal else "text_classification"
        cls = head_class(config, kind)
        if not cls:
            return TaskProposal("", note=f"transformers has no {KIND_TITLES[kind].lower()} head for {names[0]}")
        what = "language-model head" if causal else "classification head sized to your classes"
        return TaskProposal(kind, KIND_TITLES[kind], "add", cls, "text",
                            f"{names[0]} has no head: training adds a {what} ({cls})")
    if hasattr(model, "pretrained_cfg") or hasattr(model, "default_cfg") or type(model).__module__.startswith(
            "torchvision.models"):
        if any(isinstance(m, nn.Linear) for m in model.modules()):
            return TaskProposal("classification", KIND_TITLES["classification"], "present", "", "imagefolder")
    return TaskProposal("")


def align_frozen(model: nn.Module, names: list[str]) -> list[str]:
    """``[model] frozen`` names written for the folder's bare model, prefixed to fit the model with its head.

    ``embeddings`` of a ``BertModel`` is ``bert.embeddings`` of a
    ``BertForSequenceClassification``: a name the model lacks is tried again with
    ``base_model_prefix + "."`` in front. Names that fit as they are stay.
    """
    prefix = getattr(model, "base_model_prefix", "")
    if not prefix:
        return list(names)
    known = {n for n, _ in model.named_parameters()} | {n for n, _ in model.named_modules()}
    out = []
    for name in names:
        out.append(name if name in known or f"{prefix}.{name}" not in known and
                   not any(k.startswith(f"{prefix}.{name}.") for k in known) else f"{prefix}.{name}")
    return out


def _folder(cfg: TrainConfig, base: Path | None) -> Path | None:
    mc = cfg.model
    if mc.init or mc.resume or not mc.checkpoint:
        return None  # a run's own init.pt records the model with its head
    path = Path(mc.checkpoint).expanduser()
    path = base / path if base is not None and not path.is_absolute() else path
    return path if (path / "config.json").is_file() else None


def model_for_task(cfg: TrainConfig, base: Path | None = None, *, trust: bool = False,
                   out: Callable[[str], Any] | None = None) -> tuple[nn.Module, Any] | None:
    """The model of a text or image run on a model folder, with the head its task needs; None for any other run.

    Also settles ``[data] tokenizer`` (the folder, when not set) so that the data and the
    causal LM's samples tokenize with the model's own tokenizer, ``[data] processor`` (the
    folder, when not set; image classification on an ImageFolder) so that images go through
    the model's own image processor, and applies ``[model] frozen`` (:func:`align_frozen`).

    Parameters
    ----------
    cfg : TrainConfig
        ``task.kind`` in :data:`~workbench.core.train.config.HF_KINDS`, ``model.checkpoint`` a model folder
        (neither ``init`` nor ``resume``); else None is returned and nothing is read.
    base : Path, optional
        The run file's folder (relative paths start there).
    trust : bool
        As :func:`~workbench.core.model.opening.open_model`.
    out : callable, optional
        Takes a line saying that a head was added.

    Returns
    -------
    (model, spec) or None
        ``spec`` builds the model with its head again (recorded in checkpoints and run.toml).

    Raises
    ------
    DataError
        The data's classes cannot be read (text classification).
    TrainingError, WorkbenchError
        The folder cannot be opened, has no class with the task's head, or ``frozen`` names a missing parameter.
    """
    folder = _folder(cfg, base) if cfg.task.kind in HF_KINDS else None
    if folder is None:
        return None
    from workbench.core.model.freezing import apply_frozen
    from workbench.core.model.formats import read_checkpoint
    from workbench.core.model.names import UnknownPathError
    from workbench.core.model.opening import open_checkpoint, open_spec
    from workbench.core.model.spec import ArchSpec

    if cfg.data.dataset == "text" and not cfg.data.tokenizer:
        cfg.data.tokenizer = str(folder.resolve())
    if cfg.task.kind == "image_classification" and cfg.data.dataset == "imagefolder":
        from workbench.core.train.data.image_processor import load_image_processor

        if not cfg.data.processor:
            cfg.data.processor = str(folder.resolve())
        load_image_processor(cfg.data.processor)  # a folder without one: one line, before any run folder
    ckpt = read_checkpoint(folder, trust=trust)
    opened = open_checkpoint(ckpt, None, trust=trust)
    model, spec = opened.model, opened.spec
    if not _is_hf(model) or spec is None:
        raise TrainingError(f"{folder}: [task] kind = {cfg.task.kind!r} needs a transformers model folder; this "
                            f"one opens as {type(model).__name__}")
    kind = cfg.task.kind
    classes: list[str] = []
    multi_label = False
    if kind == "image_classification":
        from workbench.core.train.data.image_processor import image_classes

        classes = image_classes(cfg.data)
    elif kind in LABELLED_KINDS:
        from workbench.core.train.data.text import is_multi_label, task_classes

        classes = task_classes(cfg.data, kind)
        multi_label = kind == "text_classification" and is_multi_label(cfg.data)
    extra = _label_config(kind, classes, multi_label)
    proposal = propose_task(model, opened)
    fits = proposal.kind == kind and proposal.head == "present" and \
        (kind not in LABELLED_KINDS or model.config.num_labels == len(classes))
    if fits and kind in LABELLED_KINDS:
        model.config.id2label, model.config.label2id = extra["id2label"], extra["label2id"]
        if kind == "text_classification":  # the loss transformers picks: cross-entropy or BCE with logits
            model.config.problem_type = extra["problem_type"]
        config_json = json.dumps(model.config.to_diff_dict(), separators=(",", ":"), sort_keys=True, default=str)
        spec = ArchSpec(spec.name, {**spec.kwargs, "architecture": type(model).__name__, "config_json": config_json})
    elif not fits:
        cls = head_class(model, kind)
        if not cls:
            raise TrainingError(f"{folder}: transformers has no {KIND_TITLES[kind].lower()} class for "
                                f"{type(model).__name__}; choose another [task] kind")
        built = open_spec(ckpt, ArchSpec(spec.name, {**spec.kwargs, "architecture": cls, **_toml_safe(extra)}),
                          partial=True)
        if out is not None:
            out(f"model: {type(model).__name__} -> {cls}: the folder's weights loaded, a new "
                f"{'head for ' + str(len(classes)) + ' classes' if extra else 'head'} initialized")
        model, spec = built.model, _config_spec(built.spec, built.model)
    try:
        apply_frozen(model, align_frozen(model, list(cfg.model.frozen)))
    except UnknownPathError as e:
        raise TrainingError(f"[model] frozen: {e}") from e
    return model, spec


def _label_config(kind: str, classes: list[str], multi_label: bool = False) -> dict:
    """``num_labels`` / ``id2label`` / ``label2id`` of a head sized to ``classes`` (``{}`` for a causal LM);
    text classification also ``problem_type`` (``"multi_label_classification"``: transformers' loss is
    ``BCEWithLogitsLoss`` on ``(N, K)`` 0/1 labels; else ``"single_label_classification"``)."""
    if kind not in LABELLED_KINDS:
        return {}
    extra = {"num_labels": len(classes), "id2label": dict(enumerate(classes)),
             "label2id": {c: i for i, c in enumerate(classes)}}
    if kind == "text_classification":
        extra["problem_type"] = "multi_label_classification" if multi_label else "single_label_classification"
    return extra


def _config_spec(spec: Any, model: nn.Module) -> Any:
    """``spec`` building ``model``'s class from its whole config (labels included) as ``config_json``: a spec's
    keyword arguments are plain values (checkpoints and run.toml keep them), never ``id2label``'s dict."""
    from workbench.core.model.spec import ArchSpec

    config_json = json.dumps(model.config.to_diff_dict(), separators=(",", ":"), sort_keys=True, default=str)
    kwargs = {k: v for k, v in dict(getattr(spec, "kwargs", {}) or {}).items()
              if k not in ("num_labels", "num_classes", "id2label", "label2id")}
    return ArchSpec(getattr(spec, "name", "workbench.core.model.hf_build:build_hf_model"),
                    {**kwargs, "architecture": type(model).__name__, "config_json": config_json})


def _toml_safe(extra: dict) -> dict:
    """``id2label`` with string keys: a spec's keyword arguments are written to run.toml, whose keys are strings
    (transformers' config turns them back into ints)."""
    return {k: ({str(i): c for i, c in v.items()} if k == "id2label" else v) for k, v in extra.items()}


def _prefixed_edit(edit: dict, prefix: str) -> dict:
    """``edit`` with its module paths under ``prefix`` (the base model inside the class with the head)."""
    out = dict(edit)
    if isinstance(out.get("path"), str):
        out["path"] = f"{prefix}.{out['path']}"
    if isinstance(out.get("paths"), list):
        out["paths"] = [f"{prefix}.{p}" for p in out["paths"]]
    return out


def add_task_head(model: nn.Module, spec: Any, kind: str, classes: list[str] | None = None,
                  edits: list[dict] | None = None, multi_label: bool = False
                  ) -> tuple[nn.Module, Any, list[dict], str] | None:
    """The model shown in the window with the head a text task needs, its weights kept (no file is read).

    What :func:`model_for_task` does for ``workbench train``, done on the live model of
    the window: a bare encoder (``BertModel``) becomes its ``*ForSequenceClassification``
    (or ``*ForTokenClassification``) with a new head of ``len(classes)`` outputs and the labels as
    ``id2label``; a classifier
    with a head of another size gets a new one; a bare decoder gets its LM head. The base
    model's weights and ``requires_grad`` flags are copied; the structural ``edits`` made
    on it (LoRA adapters) are replayed on the new model's base first, and the new head is
    trainable (LoRA's "everything else frozen" never freezes the head the task needs).

    Parameters
    ----------
    model : nn.Module
        A transformers ``PreTrainedModel``.
    spec : ArchSpec
        Its spec (``build_hf_model`` keyword arguments).
    kind : str
        ``"text_classification"``, ``"token_classification"``, ``"causal_lm"`` or ``"image_classification"``.
    classes : list of str, optional
        The data's classes (text or image classification) or tags (token classification).
    edits : list of dict, optional
        The structural edits made on ``model`` since it was opened (replayed, paths prefixed).
    multi_label : bool
        Text classification with one 0/1 column per class (``[data] target`` a list): the head's
        ``problem_type`` is ``"multi_label_classification"``.

    Returns
    -------
    (model, spec, edits, note) or None
        None when ``model`` already has the head (of the right size): nothing to do.

    Raises
    ------
    TrainingError
        transformers has no class with that head for this model.
    """
    from workbench.core.model.edits import apply_edits

    if not _is_hf(model) or kind not in HF_KINDS:
        return None
    proposal = propose_task(model)
    classes = list(classes or [])
    extra = _label_config(kind, classes, multi_label)
    if proposal.kind == kind and proposal.head == "present" and \
            (kind not in LABELLED_KINDS or model.config.num_labels == len(classes)):
        if "problem_type" in extra:
            model.config.problem_type = extra["problem_type"]
        return None
    name = head_class(model, kind)
    if not name:
        raise TrainingError(f"transformers has no {KIND_TITLES[kind].lower()} class for {type(model).__name__}; "
                            "choose another task")
    import copy

    import transformers

    config = copy.deepcopy(model.config)
    for key, value in extra.items():
        setattr(config, key, value)
    config.architectures = [name]
    new = getattr(transformers, name)(config)
    prefix = new.base_model_prefix
    old_base = getattr(model, getattr(model, "base_model_prefix", ""), None) \
        if proposal.head == "present" else model
    old_base = old_base if isinstance(old_base, nn.Module) else model
    moved = [_prefixed_edit(e, prefix) for e in (edits or [])]
    if moved:
        apply_edits(new, moved)
    # strict for every weight the new base has; a part the head's class leaves out of its base (the pooler of a
    # *ForTokenClassification: add_pooling_layer=False) is dropped
    missing = new.base_model.load_state_dict(old_base.state_dict(), strict=False).missing_keys
    if missing:
        raise TrainingError(f"{type(model).__name__} -> {name}: the new model's {missing[0]} (and "
                            f"{len(missing) - 1} more) is not in the model; choose another task")
    flags = {n: p.requires_grad for n, p in old_base.named_parameters()}
    for n, p in new.base_model.named_parameters():
        p.requires_grad_(flags.get(n, True))
    base_ids = {id(p) for p in new.base_model.parameters()}
    for p in new.parameters():
        if id(p) not in base_ids:
            p.requires_grad_(True)  # the new head trains, whatever LoRA froze
    new.train(model.training)
    new_spec = _config_spec(spec, new)
    shown = f"{', '.join(map(str, classes[:5]))}{'…' if len(classes) > 5 else ''}"
    what = f"a head for {len(classes)} classes ({shown})" if kind in LABELLED_KINDS else "a language-model head"
    note = f"{type(model).__name__} -> {name}: the weights kept, {what} added (trainable)"
    return new, new_spec, moved, note
