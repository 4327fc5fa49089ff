"""Plain configuration objects for a training run, with TOML round-trips.

A :class:`TrainConfig` holds every setting of a run (data, model, loss,
optimizer, scheduler, device, seed, run folder) so that the ``run.toml`` written
into each run folder is enough to replay it: ``workbench train run.toml``.

TOML has no ``None``: unset optional fields are simply left out of the file and
come back as their defaults.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

import tomli_w

#: The built-in datasets; ``data.dataset`` may also be a registered name or a spec (``file.py:make_dataset``).
DATASETS = ("digits", "mnist", "fashionmnist", "cifar10", "imagefolder", "fake", "csv", "text")
#: ``[task] kind``: ``"auto"`` takes the dataset's own (a CSV's inferred task) or classification.
TASK_KINDS = ("auto", "classification", "regression", "multilabel", "model_loss", "text_classification",
              "token_classification", "causal_lm", "image_classification")
#: The kinds whose batches are tokenized text (``[data] dataset = "text"``) fed to a Hugging Face model.
TEXT_KINDS = ("text_classification", "token_classification", "causal_lm")
#: The kinds trained on a transformers model folder, with the head the task needs (``task.from_model``).
HF_KINDS = TEXT_KINDS + ("image_classification",)
#: How a CSV's categorical (non-numeric) feature columns become numbers.
CATEGORICAL = ("onehot", "codes")
NORMALIZE_PRESETS = ("auto", "imagenet", "mnist", "cifar10", "digits", "none")
CHANNELS = ("keep", "grayscale", "rgb")
LOSSES = ("cross_entropy", "mse", "bce_with_logits", "l1")
OPTIMIZERS = ("sgd", "adam", "adamw", "rmsprop")
SCHEDULERS = ("none", "step", "multistep", "cosine", "onecycle", "plateau")
#: How a run on several ranks spans them (``strategy``): a replica per rank (DDP), or sharded (FSDP2).
STRATEGIES = ("auto", "ddp", "fsdp")
#: ``pause_lease_s``'s default: workbench.core.attach.lease.PAUSE_LEASE_S (the reason is there; the training
#: rooms do not import the attach server, so the number is repeated, and a test checks they agree).
PAUSE_LEASE_S = 120.0
#: What a lapsed pause lease does (workbench.core.attach.lease.LEASE_MODES).
PAUSE_LEASE_MODES = ("resume", "hold")


@dataclass
class DataConfig:
    """Where the data comes from and how it is batched.

    Attributes
    ----------
    dataset : str
        One of ``"digits"`` (scikit-learn's 1,797 8x8 digits, built in, no download),
        ``"mnist"``, ``"fashionmnist"``, ``"cifar10"`` (torchvision, from ``root``),
        ``"imagefolder"`` (``root/train`` + ``root/val``, or ``root`` split by
        ``val_fraction``), ``"fake"`` (random tensors of ``fake_shape``), ``"csv"``
        (a table file ``root``: see ``target``), or the user's own: a registered
        dataset name or a spec ``"pkg.mod:make"`` / ``"file.py:make"`` whose callable,
        called with ``kwargs``, returns ``(train, val)``, ``{"train": ..., "val": ...}``
        (optionally ``"collate_fn"``) of :class:`torch.utils.data.Dataset`.
    root : str
        Folder of a torchvision dataset or of an ImageFolder tree, or the table file
        of ``"csv"`` (``.csv``, ``.csv.gz``; ``.parquet`` with pyarrow). Empty: not set.
    target : list of str
        ``"csv"``: the target column(s); one column may be given as a string
        (``target = "price"``).
    features : list of str
        ``"csv"``: the feature columns; empty = every column but the targets.
    categorical : str
        ``"csv"``: non-numeric feature columns as ``"onehot"`` columns or integer ``"codes"``.
    kwargs : dict
        Keyword arguments of a user dataset factory (plain data only).
    download : bool
        Let torchvision download MNIST / FashionMNIST / CIFAR10 into ``root``.
    val_fraction : float
        Share of the samples held out for validation (digits, fake, ImageFolder
        without ``val/``). torchvision datasets validate on their official test split.
    split_seed : int
        Seed of the train/validation split (independent of the training seed, so
        the validation set stays the same across runs).
    image_size : int
        Resize the shorter side to this many pixels; 0 = keep the native size.
    center_crop : int
        Center crop to a square of this many pixels after resizing; 0 = none.
    channels : str
        ``"keep"``, ``"grayscale"`` (1 channel) or ``"rgb"`` (3 channels).
    normalize : str
        Normalization preset: ``"auto"`` (the dataset's own), ``"imagenet"``,
        ``"mnist"``, ``"cifar10"``, ``"digits"`` or ``"none"``.
    random_flip : bool
        Random horizontal flip (training split only).
    random_crop : int
        Random crop with this much zero padding on each side, back to the input
        size (training split only); 0 = off.
    batch_size, shuffle, drop_last
        Passed to the :class:`torch.utils.data.DataLoader` (the in-memory
        datasets honour them too).
    num_workers : int or "auto"
        DataLoader worker processes. ``"auto"``: the usable cores
        (``os.sched_getaffinity``) minus one, at most 8, for file-backed
        datasets; in-memory datasets (digits, fake) never use workers.
    pin_memory : bool or "auto"
        Page-locked host batches; ``"auto"``: on when the device is CUDA.
    persistent_workers : bool or "auto"
        Keep the workers alive between epochs; ``"auto"``: whenever there are workers.
    decode_on_gpu : bool or "auto"
        ImageFolder: workers read the JPEG bytes and the batch is decoded and
        transformed on the GPU; ``"auto"``: on when the device is CUDA.
    skip_unreadable : bool
        Skip image files that cannot be read (reported by name at the end of
        each epoch) instead of stopping the run.
    fake_shape : list of int
        ``[C, H, W]`` of the ``"fake"`` images.
    fake_size : int
        Number of ``"fake"`` samples (train + validation).
    num_classes : int
        Classes of the ``"fake"`` dataset.
    text : str
        ``"text"``: the column of the texts (default ``"text"``); token classification: the column of
        each row's list of words (default ``"tokens"``).
    text_pair : str
        ``"text"``: a second text column given to the tokenizer as the pair (sentence-pair tasks); empty: none.
    val : str
        ``"text"``: a validation file of the same columns; empty: ``val_fraction`` of ``root`` is held out.
    tokenizer : str
        ``"text"``: the folder of the tokenizer (``AutoTokenizer``, local files, no remote code); empty:
        the model folder of ``[model] checkpoint``.
    max_length : int
        ``"text"``, text classification: tokens per text after truncation; 0 = the tokenizer's own
        ``model_max_length``, at most 512.
    block_size : int
        ``"text"``, causal LM: tokens per packed block; 0 = ``min(model_max_length, 128)``.
    prompt, response : str
        ``"text"``, causal LM: an instruction column and its answer column; each row is one example
        (rendered with the tokenizer's chat template when it has one), the loss on the answer only.
    messages : str
        ``"text"``, causal LM: a column of conversations (lists of ``{role, content}``) rendered with
        the tokenizer's chat template, the loss on the assistant's turns only.
    processor : str
        ``"imagefolder"`` with ``[task] kind = "image_classification"``: the folder of the model's image
        processor (``AutoImageProcessor``, local files, no remote code), which resizes and normalizes
        each image; empty: the model folder of ``[model] checkpoint``.
    """

    dataset: str = "digits"
    root: str = ""
    download: bool = False
    val_fraction: float = 0.2
    split_seed: int = 0
    image_size: int = 0
    center_crop: int = 0
    channels: str = "keep"
    normalize: str = "auto"
    random_flip: bool = False
    random_crop: int = 0
    batch_size: int = 64
    shuffle: bool = True
    num_workers: int | str = field(default="auto", metadata={"auto": int})
    pin_memory: bool | str = field(default="auto", metadata={"auto": bool})
    drop_last: bool = False
    persistent_workers: bool | str = field(default="auto", metadata={"auto": bool})
    decode_on_gpu: bool | str = field(default="auto", metadata={"auto": bool})
    skip_unreadable: bool = False
    fake_shape: list = field(default_factory=lambda: [3, 32, 32])
    fake_size: int = 512
    num_classes: int = 10
    target: list = field(default_factory=list, metadata={"one_or_list": True})
    features: list = field(default_factory=list, metadata={"one_or_list": True})
    categorical: str = "onehot"
    kwargs: dict = field(default_factory=dict)
    text: str = ""
    text_pair: str = ""
    val: str = ""
    tokenizer: str = ""
    max_length: int = 0
    block_size: int = 0
    prompt: str = ""
    response: str = ""
    messages: str = ""
    processor: str = ""


@dataclass
class TaskConfig:
    """What the run optimizes and reports (``[task]`` in ``run.toml``).

    Attributes
    ----------
    kind : str
        ``"classification"`` (class-index targets, cross-entropy), ``"regression"``
        (real-valued targets of any shape, MSE / L1 / Huber), ``"multilabel"``
        (multi-hot targets, BCE with logits), ``"model_loss"`` (the model returns its
        own loss, as Hugging Face models do when the batch holds ``labels``; a dict
        batch is passed as keyword arguments) or ``"auto"`` (the dataset's own
        task when it infers one, e.g. a CSV's, else classification),
        ``"text_classification"`` (a Hugging Face ``*ForSequenceClassification`` on
        tokenized text; a bare encoder folder gets a new head sized to the data's
        classes), ``"token_classification"`` (a ``*ForTokenClassification`` on words and
        one tag per word), ``"causal_lm"`` (a ``*ForCausalLM`` on packed blocks of tokens, or on
        prompt / response rows with the loss on the response) or ``"image_classification"`` (a
        ``*ForImageClassification`` on an ImageFolder through the folder's own image processor; a
        bare ``ViTModel`` gets a head sized to the folder's classes).
    step : str
        A training step ``(model, batch) -> loss`` or ``-> {"loss": loss, "<metric>": value, ...}``:
        a registered step name or a spec (``"file.py:training_step"``). Empty: the
        built-in step of ``kind``.
    validation_step : str
        The same for validation; empty: ``step`` under ``torch.no_grad()``.
    loss : str
        The criterion, called ``loss(output, target)``: a built-in name
        (``cross_entropy``, ``mse``, ``l1``, ``huber``, ``bce_with_logits``) or a spec
        (a class is instantiated without arguments). Empty: the top-level ``loss``
        for classification, else the kind's default (mse, bce_with_logits).
    metrics : list of str
        Names of built-in metrics (``accuracy``, ``top5``, ``mae``, ``rmse``, ``r2``,
        ``f1``, ``map``) or specs of ``metric(output, target) -> number``
        (averaged over samples). Empty: the kind's defaults.
    monitor : str
        The epoch metric ``best.pt`` follows (``val_loss``, ``val_accuracy``, ``val_r2``...).
    mode : str
        ``"min"`` or ``"max"``: whether a smaller or a larger ``monitor`` is better.
    files : dict
        ``{path: sha256}`` of the user's code files the specs name, written by the run
        so that a replay can say when one changed.
    prompts : list of str
        ``causal_lm``: texts the model completes at every evaluation (``samples.jsonl``
        in the run folder); empty: the first tokens of the first validation rows.
    max_new_tokens : int
        ``causal_lm``: tokens generated per prompt.
    do_sample : bool
        ``causal_lm``: sample the completions (``generate(do_sample=True)``) instead of greedy decoding.
    temperature : float
        ``causal_lm``, with ``do_sample``: the softmax temperature (Hugging Face's ``generate`` argument).
    sample_seed : int
        ``causal_lm``, with ``do_sample``: the seed each prompt's sampling starts from, so the same prompt
        draws the same noise at every evaluation (the training's random streams are left untouched).
    """

    kind: str = "auto"
    step: str = ""
    validation_step: str = ""
    loss: str = ""
    metrics: list = field(default_factory=list)
    monitor: str = "val_loss"
    mode: str = "min"
    files: dict = field(default_factory=dict)
    prompts: list = field(default_factory=list)
    max_new_tokens: int = 20
    do_sample: bool = False
    temperature: float = 1.0
    sample_seed: int = 0


@dataclass
class ModelConfig:
    """What model a headless run trains (``[model]`` in ``run.toml``).

    Attributes
    ----------
    arch : str
        Architecture name for ``meta_build.build_module`` (``"digits_cnn"``, a
        torchvision name, or a factory spec ``"pkg.mod:callable"``). A run file whose
        ``[model]`` names a ``checkpoint`` or ``init`` and no ``arch`` reads it as empty:
        the file's own architecture (a model folder's config) is used.
    kwargs : dict
        Keyword arguments of the architecture (``num_classes`` ...).
    checkpoint : str
        A checkpoint to start from (weights only, unless ``resume``). Empty: none.
    resume : bool
        Resume the whole training state (optimizer, scheduler, epoch, step,
        frozen set, RNG) from ``checkpoint`` instead of loading only its weights.
    frozen : list of str
        Qualified parameter names frozen at the start (``requires_grad=False``).
    init : str
        The weights the run started from: the ``init.pt`` every run writes beside
        its run.toml (relative paths start at the run file's folder). Takes
        precedence over ``checkpoint`` unless ``resume``.
    edits : list of dict
        Structural edits made in the window before the run, replayed between
        building ``arch`` and loading ``init``, e.g.
        ``{op = "replace_head", path = "fc", num_outputs = 2}``.
    source : str
        The file the model was opened from, for the record (not read).
    """

    arch: str = "digits_cnn"
    kwargs: dict = field(default_factory=dict)
    checkpoint: str = ""
    resume: bool = False
    frozen: list = field(default_factory=list)
    init: str = ""
    edits: list = field(default_factory=list)
    source: str = ""


@dataclass
class TrainConfig:
    """Every setting of a training run.

    Attributes
    ----------
    data : DataConfig
    task : TaskConfig
        The task: built-in kind or the user's step, loss, metrics and best-checkpoint monitor.
    model : ModelConfig
        Used by the headless ``workbench train``; a GUI run fills it in from the
        model it trains so ``run.toml`` can be replayed.
    epochs : int
    device : str
        ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"mps"``.
    loss : str
        ``"cross_entropy"``, ``"mse"``, ``"bce_with_logits"`` or ``"l1"``. With
        integer class targets and ``(N, C)`` outputs, mse / l1 / bce compare with
        one-hot targets.
    optimizer : str
        ``"sgd"``, ``"adam"``, ``"adamw"`` or ``"rmsprop"``.
    lr : float
        Learning rate of the head (and of everything when ``backbone_lr_mult == 1``).
        For ``"onecycle"`` it is the peak (``max_lr``).
    momentum : float
        SGD / RMSprop momentum.
    nesterov : bool
        SGD Nesterov momentum (needs ``momentum > 0``).
    weight_decay : float
    backbone_lr_mult : float
        LR multiplier of every trainable parameter outside ``head`` (separate
        ``param_groups``); 1.0 = one group.
    head : str or None
        Qualified module name of the head; None = the parent module of the last
        ``nn.Linear`` (``"classifier"`` for the demo).
    scheduler : str
        ``"none"``, ``"step"``, ``"multistep"``, ``"cosine"``, ``"onecycle"`` or
        ``"plateau"``. All but ``"plateau"`` step once per optimizer step (so the
        LR curve is smooth); their periods are given in epochs below and converted
        to steps. ``"plateau"`` steps once per epoch on the validation loss.
    step_size : int
        StepLR period, epochs.
    milestones : list of int
        MultiStepLR milestones, epochs.
    gamma : float
        StepLR / MultiStepLR decay factor.
    min_lr : float
        CosineAnnealingLR ``eta_min``; ReduceLROnPlateau ``min_lr``.
    pct_start : float
        OneCycleLR warm-up share.
    plateau_patience : int
        ReduceLROnPlateau patience, epochs.
    plateau_factor : float
        ReduceLROnPlateau factor.
    grad_clip : float or None
        Max global gradient norm (``clip_grad_norm_``); None = off.
    amp : bool
        Mixed precision: autocast with ``amp_dtype`` (bf16 on CPU always).
    amp_dtype : str
        ``"bfloat16"`` or ``"float16"`` (CUDA only; uses a GradScaler).
    seed : int
        Seeds torch, numpy and random at the start of a fresh run, and the data order.
    run_dir : str or None
        Run folder; None = a new folder under :func:`workbench.core.train.runs.folder.default_runs_root`.
    emit_every_ms : float
        Minimum interval between two ``on_metrics`` calls, milliseconds.
    checkpoint_every_epoch : bool
        Write ``last.pt`` / ``best.pt`` at each epoch end.
    checkpoint_every_steps : int
        Also write ``last.pt`` every this many optimizer steps (long epochs); 0 = off.
        Written in the background like the epoch's (README "Fitting big models").
    accumulate_grad_batches : int
        Gradient accumulation: the loss of each batch divided by N, one optimizer step
        every N batches (and at the epoch's end for a remainder); the LR schedule, the
        step counter, probes and the NaN trace count optimizer steps (Lightning's
        definitions). 1 = off.
    activation_checkpointing : bool
        Recompute activations in backward instead of keeping them: a Hugging Face model
        through ``gradient_checkpointing_enable()``, another on its repeated blocks through
        ``torch.utils.checkpoint`` (less memory, ~30 % more compute).
    compile : bool
        ``torch.compile`` the model for the training step (graph breaks and recompilations
        are said in the run's log; steps with a probe's hooks run uncompiled).
    strategy : str
        How a run launched on several ranks (``workbench train --nproc-per-node N``) spans
        them: ``"auto"`` / ``"ddp"`` (``DistributedDataParallel``: a full replica per rank) or
        ``"fsdp"`` (FSDP2 ``fully_shard``: parameters, gradients and optimizer state sharded
        over the ranks, checkpoints as ``torch.distributed.checkpoint`` folders; README
        "Fitting big models"). One process trains alone whatever it says.
    keep_frozen_bn_eval : bool
        Keep fully frozen BatchNorm layers in eval mode (running stats fixed).
        Default True: a layer the user froze stays exactly as loaded, as Keras
        and Lightning's ``BaseFinetuning(train_bn=False)`` do.
    tensorboard : bool
        Also write TensorBoard scalars into ``run_dir/tensorboard`` when the
        ``tensorboard`` package is importable.
    channels_last : bool or "auto"
        ``torch.channels_last`` memory format for the model and its 4-D input
        batches; ``"auto"``: on for CUDA when the model has a 2-D convolution.
    unfreeze : list of dict
        Staged unfreezing (ULMFiT's gradual unfreezing, Lightning's
        ``BaseFinetuning``): ``[{"epoch": 3, "module": "layer4"}, ...]`` unfreezes
        each module's parameters before the 1-based epoch ``epoch`` starts; an
        optional ``"lr_factor": 0.1`` gives their new param groups that share of
        their role's LR (ULMFiT's discriminative rates). In run.toml, ``[[unfreeze]]`` tables.
    pause_lease_s : float
        A headless run a window attached to (``workbench train``): seconds a pause outlives the
        last renewal of the window that holds it (a sleeping laptop, a dead tunnel). Default 120.
    pause_lease : str
        What a lapsed pause lease does: ``"resume"`` the training, or ``"hold"`` the pause and
        free the steering for another window.
    """

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    epochs: int = 5
    device: str = "cpu"
    loss: str = "cross_entropy"
    optimizer: str = "adam"
    lr: float = 1e-3
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 0.0
    backbone_lr_mult: float = 1.0
    head: str | None = None
    scheduler: str = "none"
    step_size: int = 1
    milestones: list = field(default_factory=list)
    gamma: float = 0.1
    min_lr: float = 0.0
    pct_start: float = 0.3
    plateau_patience: int = 2
    plateau_factor: float = 0.1
    grad_clip: float | None = None
    amp: bool = False
    amp_dtype: str = "bfloat16"
    seed: int = 0
    run_dir: str | None = None
    emit_every_ms: float = 40.0
    checkpoint_every_epoch: bool = True
    checkpoint_every_steps: int = 0
    accumulate_grad_batches: int = 1
    activation_checkpointing: bool = False
    compile: bool = False
    strategy: str = "auto"
    keep_frozen_bn_eval: bool = True
    tensorboard: bool = True
    channels_last: bool | str = field(default="auto", metadata={"auto": bool})
    unfreeze: list = field(default_factory=list)
    pause_lease_s: float = PAUSE_LEASE_S
    pause_lease: str = "resume"

    # ------------------------------------------------------------------ dict / TOML
    def to_dict(self) -> dict[str, Any]:
        """Every setting as nested plain dicts; ``None`` values are left out."""
        return _drop_none(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        """Build from :meth:`to_dict` output; missing keys take their defaults.

        Raises
        ------
        ValueError
            An unknown key or an unknown choice (dataset, loss, optimizer, ...).
        """
        d = dict(d)
        data = _build(DataConfig, d.pop("data", {}) or {}, "[data]")
        model_d = d.pop("model", {}) or {}
        if isinstance(model_d, dict) and "arch" not in model_d and (model_d.get("checkpoint") or model_d.get("init")):
            model_d = {**model_d, "arch": ""}  # the file names its own architecture (a model folder's config)
        model = _build(ModelConfig, model_d, "[model]")
        task = _build(TaskConfig, d.pop("task", {}) or {}, "[task]")
        cfg = _build(cls, d, "top level")
        cfg.data, cfg.model, cfg.task = data, model, task
        cfg.validate()
        return cfg

    def to_toml(self, path: str | Path | None = None) -> str:
        """TOML text of :meth:`to_dict`; also written atomically to ``path`` if given."""
        text = tomli_w.dumps(self.to_dict())
        if path is not None:
            from workbench.core.files import atomic_write_text

            atomic_write_text(path, text)
        return text

    @classmethod
    def from_toml(cls, path_or_text: str | Path) -> TrainConfig:
        """Read a config from a TOML file path or TOML text.

        A ``Path`` is a file; a ``str`` is TOML text when it holds a newline, or an
        ``=`` and no file of that name exists (``runs/lr=0.1/run.toml`` is a path).
        The file is read by :func:`workbench.core.run_folder.reading.read_text_file`: a FIFO,
        a device (a link to ``/dev/zero``) or a folder is refused without being
        read, at most 4 MB are read, and bytes that are not UTF-8 are said.

        Raises
        ------
        ValueError
            Not a regular file, too large, not UTF-8 (:class:`~workbench.core.run_folder.reading.NotATextFile`), bad
            TOML, an unknown key or an unknown choice; the message names the file.
        OSError
            The file is missing or cannot be opened (permissions).
        """
        import os

        from workbench.core.run_folder.reading import read_text_file

        # a link counts as on disk (a broken one is then said as missing); lexists is False for an invalid name
        is_text = isinstance(path_or_text, str) and (
            "\n" in path_or_text or ("=" in path_or_text and not os.path.lexists(path_or_text)))
        p = None if is_text else Path(path_or_text)
        text = read_text_file(p) if p is not None else str(path_or_text)
        try:
            return cls.from_dict(tomllib.loads(text))
        except (tomllib.TOMLDecodeError, ValueError) as e:
            raise ValueError(f"{p or 'TOML'}: {e}") from e
        except RecursionError:
            raise ValueError(f"{p or 'TOML'}: not TOML (nested too deeply)") from None

    def validate(self) -> None:
        """Check the choice fields.

        Raises
        ------
        ValueError
            Names the field, the bad value and the allowed ones.
        """
        checks = [
            ("task.kind", self.task.kind, TASK_KINDS),
            ("task.mode", self.task.mode, ("min", "max")),
            ("data.categorical", self.data.categorical, CATEGORICAL),
            ("data.normalize", self.data.normalize, NORMALIZE_PRESETS),
            ("data.channels", self.data.channels, CHANNELS),
            ("loss", self.loss, LOSSES),
            ("optimizer", self.optimizer, OPTIMIZERS),
            ("scheduler", self.scheduler, SCHEDULERS),
            ("amp_dtype", self.amp_dtype, ("bfloat16", "float16")),
            ("strategy", self.strategy, STRATEGIES),
            ("pause_lease", self.pause_lease, PAUSE_LEASE_MODES),
        ]
        lease_s = self.pause_lease_s
        if isinstance(lease_s, bool) or not isinstance(lease_s, (int, float)) or not 0 < lease_s < math.inf:
            raise ValueError(f"pause_lease_s = {lease_s!r}: expected a number of seconds > 0 (default "
                             f"{PAUSE_LEASE_S:g})")
        if self.data.dataset not in DATASETS and not _names_code_or_plugin(self.data.dataset):
            raise ValueError(f"data.dataset = {self.data.dataset!r} is not one of {', '.join(DATASETS)}, "
                             "nor a spec (package.module:callable or file.py:callable) or a registered dataset")
        if self.task.monitor and not isinstance(self.task.monitor, str):
            raise ValueError(f"task.monitor = {self.task.monitor!r}: expected a metric name such as val_loss")
        for name, value, allowed in checks:
            if value not in allowed:
                raise ValueError(f"{name} = {value!r} is not one of {', '.join(allowed)}")
        if self.epochs < 0 or self.data.batch_size < 1:
            raise ValueError("epochs must be >= 0 and data.batch_size >= 1")
        if isinstance(self.accumulate_grad_batches, bool) or not isinstance(self.accumulate_grad_batches, int) \
                or self.accumulate_grad_batches < 1:
            raise ValueError(f"accumulate_grad_batches = {self.accumulate_grad_batches!r}: expected a whole number >= 1")
        if isinstance(self.checkpoint_every_steps, bool) or not isinstance(self.checkpoint_every_steps, int) \
                or self.checkpoint_every_steps < 0:
            raise ValueError(f"checkpoint_every_steps = {self.checkpoint_every_steps!r}: expected a whole number "
                             ">= 0 (0 = off)")
        if self.data.max_length < 0 or self.data.block_size < 0 or self.task.max_new_tokens < 0:
            raise ValueError("data.max_length, data.block_size and task.max_new_tokens must be >= 0")
        temperature = self.task.temperature
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 < temperature < math.inf:
            raise ValueError(f"task.temperature = {temperature!r}: expected a number > 0 (greedy completions: "
                             "task.do_sample = false)")
        d = self.data
        if bool(d.prompt) != bool(d.response) or (d.messages and d.prompt):
            raise ValueError("data.prompt and data.response name an instruction column and its answer column (give "
                             "both), data.messages a column of conversations (instead of them)")
        if (d.prompt or d.messages) and (d.dataset != "text" or self.task.kind != "causal_lm"):
            raise ValueError("data.prompt / data.response / data.messages need data.dataset = \"text\" and "
                             "task.kind = \"causal_lm\"")
        if self.data.dataset == "text" and self.task.kind not in TEXT_KINDS:
            raise ValueError(f"data.dataset = \"text\" needs task.kind = one of {', '.join(TEXT_KINDS)} "
                             f"(not {self.task.kind!r})")
        for i, entry in enumerate(self.unfreeze):
            ok = (isinstance(entry, dict) and {"epoch", "module"} <= set(entry) <= {"epoch", "module", "lr_factor"}
                  and isinstance(entry["epoch"], int) and not isinstance(entry["epoch"], bool) and entry["epoch"] >= 1
                  and isinstance(entry["module"], str))
            factor = entry.get("lr_factor", 1.0) if isinstance(entry, dict) else 1.0
            if ok and (isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor > 0):
                ok = False
            if not ok:
                raise ValueError(f"unfreeze[{i}] = {entry!r}: expected {{epoch = <1-based epoch>, module = \"name\"}} "
                                 "and optionally lr_factor = <number > 0>")


def _names_code_or_plugin(name: str) -> bool:
    """A spec (``a:b``) or a dataset an installed package registers (read from metadata; nothing imported)."""
    if ":" in name:
        return True
    from workbench.core import contrib

    return name in contrib.names("dataset")


def parse_unfreeze(text: str) -> list[dict]:
    """``"3: layer4; 5: layer3*0.1, layer2"`` -> ``[{"epoch": 3, "module": "layer4"}, {"epoch": 5,
    "module": "layer3", "lr_factor": 0.1}, ...]`` (``*f``: the module's LR factor).

    Raises
    ------
    ValueError
        Names the part that is not ``<epoch>: <module>[*<factor>][, ...]`` with a whole epoch >= 1
        and a factor > 0.
    """
    out = []
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        epoch, sep, modules = part.partition(":")
        try:
            k = int(epoch)
        except ValueError:
            k = 0
        names = [m.strip() for m in modules.split(",") if m.strip()]
        if not sep or k < 1 or not names:
            raise ValueError(f"unfreeze schedule {part!r}: expected <epoch>: <module>, e.g. 3: layer4; 5: layer3*0.1")
        for m in names:
            name, star, factor = (x.strip() for x in m.partition("*"))
            entry: dict = {"epoch": k, "module": name}
            if star:
                try:
                    entry["lr_factor"] = float(factor)
                except ValueError:
                    entry["lr_factor"] = 0.0
                if not name or not entry["lr_factor"] > 0:
                    raise ValueError(f"unfreeze schedule {part!r}: {m!r} is not <module>*<LR factor > 0>, "
                                     "e.g. layer3*0.1")
            out.append(entry)
    return out


def format_unfreeze(entries: list[dict]) -> str:
    """The text :func:`parse_unfreeze` reads back (same-epoch modules joined)."""
    by_epoch: dict[int, list[str]] = {}
    for e in entries:
        factor = e.get("lr_factor")
        by_epoch.setdefault(int(e["epoch"]), []).append(str(e["module"]) + (f"*{factor:g}" if factor else ""))
    return "; ".join(f"{k}: {', '.join(v)}" for k, v in sorted(by_epoch.items()))


def _drop_none(obj):
    if isinstance(obj, dict):
        return {k: _drop_none(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, (list, tuple)):
        return [_drop_none(v) for v in obj]
    return obj


def _build(cls, d: dict, where: str):
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - set(fields))
    if unknown:
        raise ValueError(f"unknown setting(s) in {where}: {', '.join(unknown)}; known: {', '.join(fields)}")
    d = {k: [v] if isinstance(v, str) and fields[k].metadata.get("one_or_list") else v for k, v in d.items()}
    for key, value in d.items():
        auto_kind = fields[key].metadata.get("auto")
        if auto_kind is not None:  # "auto" or a value of that kind
            if value != "auto" and not _is_kind(value, auto_kind):
                raise ValueError(f"{key} = {value!r} in {where}: expected \"auto\" or {_KIND_TEXT[auto_kind]}")
            if auto_kind is int and value != "auto" and value < 0:
                raise ValueError(f"{key} = {value!r} in {where}: expected \"auto\" or a whole number >= 0")
            continue
        expected = _expected_kind(fields[key])
        if expected is not None and not _is_kind(value, expected):
            raise ValueError(f"{key} = {value!r} in {where}: expected {_KIND_TEXT[expected]}")
    return cls(**d)


_KIND_TEXT = {float: "a number (e.g. 0.001 or 1e-3)", int: "a whole number", bool: "true or false",
              str: "a quoted string", list: "a list [...]", dict: "a table {...}"}


def _expected_kind(f: dataclasses.Field):
    """The kind of value a field takes, from its default (None: any, e.g. optional fields)."""
    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    for kind in (bool, int, float, str, list, dict):
        if isinstance(default, kind):
            return kind
    return None


def _is_kind(value, kind) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


#: torch optimizer class names -> the ``optimizer`` choices of :class:`TrainConfig`.
OPTIMIZER_CLASSES = {"SGD": "sgd", "Adam": "adam", "AdamW": "adamw", "RMSprop": "rmsprop"}


def settings_from_checkpoint(path: str | Path | None, raw: dict | None, optimizer_class: str | None = None,
                             optimizer_hparams: dict | None = None) -> TrainConfig | None:
    """The training settings a checkpoint records, for the settings form.

    In order of preference: the ``run.toml`` beside the file (a Workbench run
    folder), the ``config`` entry of a Workbench training checkpoint, or just the
    optimizer class and hyper-parameters of any checkpoint that stores an
    optimizer state (``optimizer_class`` as ``CheckpointMetadata`` reads it).

    Returns
    -------
    TrainConfig or None
        None when the file records no settings. ``run_dir`` is always None (a
        new run gets a new folder).
    """
    cfg = None
    run_toml = Path(path).with_name("run.toml") if path else None
    if run_toml is not None and run_toml.is_file():
        try:
            cfg = TrainConfig.from_toml(run_toml)
        except (ValueError, OSError, TypeError):
            cfg = None
    if cfg is None and isinstance(raw, dict) and isinstance(raw.get("config"), dict):
        try:
            cfg = TrainConfig.from_dict(raw["config"])
        except (ValueError, TypeError):
            cfg = None
    if cfg is None and optimizer_class in OPTIMIZER_CLASSES:
        cfg = TrainConfig(optimizer=OPTIMIZER_CLASSES[optimizer_class])
        hp = optimizer_hparams or {}
        for key in ("lr", "momentum", "weight_decay"):
            if isinstance(hp.get(key), (int, float)) and not isinstance(hp.get(key), bool):
                setattr(cfg, key, float(hp[key]))
        if isinstance(hp.get("nesterov"), bool):
            cfg.nesterov = hp["nesterov"]
    if cfg is not None:
        cfg.run_dir = None
    return cfg
