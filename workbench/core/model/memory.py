"""Will it fit: the memory a training step needs, per module, estimated without running on the device.

:func:`estimate_memory` gives, for a model, an example input, a batch size, an
optimizer and a precision, four parts per module (qualified name, ``""`` for
the root) in bytes:

- ``params_bytes``: ``numel x element_size`` of each parameter, counted once at
  its first owner in ``named_modules()`` order (tied weights once, as the
  module tree counts them). Buffers (BatchNorm running statistics) are not
  counted: the tree's Size column has them.
- ``grads_bytes``: the same for the parameters with ``requires_grad`` (a
  gradient has its parameter's dtype and shape).
- ``optimizer_bytes``: the state tensors ``torch.optim`` creates per trainable
  parameter, each ``zeros_like(p)`` / ``clone(grad)`` (the parameter's dtype):
  Adam / AdamW 2 (``exp_avg``, ``exp_avg_sq``), SGD 1 with momentum
  (``momentum_buffer``) else 0, RMSprop 1 (``square_avg``) plus 1 with momentum
  (``momentum_buffer``) -- :data:`OPTIMIZER_STATES`, read from
  ``torch/optim/adam.py``, ``sgd.py`` and ``rmsprop.py``. The per-parameter
  scalar ``step`` tensors (4 bytes each, on the CPU unless fused or
  capturable) are left out.
- ``activations_bytes``: the tensors autograd saves for backward, as PyTorch's
  own ``torch.autograd.graph.saved_tensors_hooks`` reports them, during one
  forward of a batch of ``batch_size`` in training mode with the model's real
  ``requires_grad`` flags (frozen parts save less, as they would). The forward
  runs on fake tensors (``torch._subclasses.fake_tensor.FakeTensorMode``):
  shapes and dtypes only, nothing allocated, nothing computed, whatever device
  the model is on (a model on ``meta`` included). A saved tensor counts the
  bytes of its storage (``untyped_storage().nbytes()``), once per storage
  (a ReLU's output saved again as the next Linear's input counts once), at the
  innermost module whose ``forward`` was running when autograd saved it;
  parameters saved for backward (a Linear's ``weight``) are not counted again.
  The input batch counts where a module saves it.

Every module's entry is *inclusive*: it sums its subtree, like the tree's
parameter counts; the root's entry is the model's total.
``total_bytes = params + grads + optimizer + activations``.

Precision
---------
``"fp32"``: the forward as the model is. ``"bf16"`` / ``"fp16"``: automatic
mixed precision (``torch.autocast``), the convention of Lightning's
``"bf16-mixed"`` and Hugging Face's ``bf16=True``: parameters, gradients and
optimizer states keep the parameters' dtype (fp32); only the activations the
autocast ops save are in 16 bits. The autocast runs on the device type of the
fake tensors (the model's device, ``cpu`` for ``meta``), whose cast lists
differ slightly from CUDA's.

Activation checkpointing
------------------------
``activation_checkpointing=True``: the activations a run with
``activation_checkpointing = true`` keeps (each checkpointed block's inputs, and
one block's recomputation at a time, after Chen et al. 2016), worked out from the
same fake forward by :mod:`~workbench.core.model.memory_checkpointing`.
Every estimate also carries that figure (``activations_checkpointed_bytes``), so
:func:`fit_summary` can say whether checkpointing would make a step fit.

What is not counted: the allocator's caching and fragmentation, the CUDA
context (a few hundred MB), the temporaries of backward and of the optimizer
step (cuDNN's convolution workspace among them: on an H200 the demo CNN at batch
4096 peaked at 609 MiB against 138 MiB estimated, ~370 MiB of it workspace), and
the output of the forward when nothing saves it (a loss on top of the logits saves
them). :data:`FIT_HEADROOM` in :func:`fit_summary` keeps a margin
for them.

This module never imports Qt, and nothing of training or probes.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from workbench.core.model.example_input import ExampleInput, model_device_dtype
from workbench.core.model.memory_checkpointing import checkpointed_activations, checkpointed_blocks

__all__ = [
    "MemoryEstimate",
    "ModuleMemory",
    "estimate_memory",
    "saved_tensor_bytes",
    "fit_summary",
    "fit_line",
    "device_memory",
    "meta_copy",
    "OPTIMIZER_STATES",
    "PRECISIONS",
    "FIT_HEADROOM",
    "MEMORY_KEYS",
]

#: ``(states without momentum, states with momentum)`` per trainable element, in the parameter's dtype, as
#: torch.optim creates them (Adam/AdamW: exp_avg, exp_avg_sq; SGD: momentum_buffer; RMSprop: square_avg, and
#: momentum_buffer with momentum > 0). The names are the optimizers of a Workbench run (run.toml ``optimizer``).
OPTIMIZER_STATES = {"adamw": (2, 2), "adam": (2, 2), "sgd": (0, 1), "rmsprop": (1, 2)}
#: Precisions: the autocast dtype of the forward (None: as the model is).
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
#: Share of the device's memory a run may plan to use: the CUDA context, the caching allocator's fragmentation
#: and the temporaries of backward and of the optimizer step are not in the estimate (a few hundred MB to ~10 %).
FIT_HEADROOM = 0.9
#: The names of one module's entry, as ``workbench inspect --memory --json`` writes them.
MEMORY_KEYS = ("params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "total_bytes")


@dataclass(frozen=True)
class ModuleMemory:
    """Memory of one module's subtree for a training step, in bytes.

    Attributes
    ----------
    params_bytes, grads_bytes, optimizer_bytes, activations_bytes : int
        See the module docstring for what each counts.
    """

    params_bytes: int = 0
    grads_bytes: int = 0
    optimizer_bytes: int = 0
    activations_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        """``params + grads + optimizer + activations`` (bytes)."""
        return self.params_bytes + self.grads_bytes + self.optimizer_bytes + self.activations_bytes

    def as_dict(self) -> dict[str, int]:
        """The five numbers under :data:`MEMORY_KEYS` (plain ints)."""
        return {k: int(getattr(self, k)) for k in MEMORY_KEYS}


@dataclass(frozen=True)
class MemoryEstimate:
    """What :func:`estimate_memory` found.

    Attributes
    ----------
    modules : dict of str to ModuleMemory
        Inclusive entry per qualified name (``named_modules()`` order), ``""`` the root.
    batch_size : int
    optimizer : str
    momentum : float
    precision : str
        ``"fp32"``, ``"bf16"`` or ``"fp16"``.
    example : str
        The input the forward ran on (shapes and dtypes), for messages.
    device : str
        The device type the fake forward ran as (``"cpu"``, ``"cuda"``).
    activation_checkpointing : bool
        Whether ``modules`` count the activations with activation checkpointing on
        (:mod:`~workbench.core.model.memory_checkpointing`).
    checkpointed_blocks : int
        How many blocks checkpointing recomputes (0: the model has none, and checkpointing changes nothing).
    recompute_bytes : int
        With checkpointing on: the largest block's recomputed activations, in the root's own entry (0 when off).
    activations_checkpointed_bytes : int
        The root's activations with checkpointing on, whatever ``activation_checkpointing`` says (what
        :func:`fit_summary` offers it for).
    """

    modules: dict[str, ModuleMemory]
    batch_size: int
    optimizer: str
    momentum: float
    precision: str
    example: str = ""
    device: str = "cpu"
    activation_checkpointing: bool = False
    checkpointed_blocks: int = 0
    recompute_bytes: int = 0
    activations_checkpointed_bytes: int = 0

    @property
    def root(self) -> ModuleMemory:
        """The whole model's entry."""
        return self.modules[""]

    @property
    def total_bytes(self) -> int:
        """The whole model's total (bytes)."""
        return self.root.total_bytes


def _storage_key(t: torch.Tensor):
    from torch.multiprocessing.reductions import StorageWeakRef

    return StorageWeakRef(t.untyped_storage())


class _ModuleStack:
    """The modules whose ``forward`` is running, innermost last, kept by pre/post forward hooks."""

    def __init__(self, model: nn.Module):
        self.stack: list[nn.Module] = []
        self.handles = []
        for module in model.modules():
            self.handles.append(module.register_forward_pre_hook(self._enter))
            self.handles.append(module.register_forward_hook(self._leave, always_call=True))

    def _enter(self, module, _inputs):
        self.stack.append(module)

    def _leave(self, module, _inputs, _output):
        if self.stack and self.stack[-1] is module:
            self.stack.pop()

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()


@contextmanager
def saved_tensor_bytes(model: nn.Module, exclude: Iterable[torch.Tensor] = (),
                       storages: dict | None = None) -> Iterator[dict[nn.Module | None, int]]:
    """Count the bytes autograd saves for backward inside the block, per innermost running module.

    Works the same on real tensors and on fake ones: each saved tensor's
    storage counts once (``untyped_storage().nbytes()``), at the innermost
    module of ``model`` whose ``forward`` was running when it was saved (None:
    outside every module); storages of ``exclude`` (the parameters) never count.

    Parameters
    ----------
    model : nn.Module
        The modules to attribute to (hooks on each, removed on exit).
    exclude : iterable of Tensor
        Tensors whose storages are not activations (parameters, buffers).
    storages : dict, optional
        Filled too, when given: ``{storage key: (module or None, bytes)}`` of each counted storage (the key is a
        ``StorageWeakRef``), what :mod:`~workbench.core.model.memory_checkpointing` needs.

    Yields
    ------
    dict
        ``{module: bytes}``, filled while the block runs. Every counted tensor is
        kept referenced until the block ends, so no storage address is reused
        and counted twice.
    """
    skip = {_storage_key(t) for t in exclude}
    seen: set = set()
    kept: list[torch.Tensor] = []  # keeps storages alive: a freed storage's address could be reused
    counts: dict[nn.Module | None, int] = {}
    stack = _ModuleStack(model)

    def pack(t: torch.Tensor):
        key = _storage_key(t)
        if key not in skip and key not in seen:
            seen.add(key)
            kept.append(t)
            owner = stack.stack[-1] if stack.stack else None
            nbytes = t.untyped_storage().nbytes()
            counts[owner] = counts.get(owner, 0) + nbytes
            if storages is not None:
                storages[key] = (owner, nbytes)
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield counts
    finally:
        stack.remove()
        kept.clear()


class _FakeScalars(TorchDispatchMode):
    """Reading a fake tensor's scalar gives ``True`` / ``1`` / ``1.0`` instead of raising.

    The fake forward has no values; a data-dependent branch (transformers' "is
    the attention mask all ones") takes the branch an input of ones and in-range
    ids takes, as :class:`~workbench.core.model.flops.MetaScalars` does on ``meta``.
    """

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torch._subclasses.fake_tensor import FakeTensor

        if func is torch.ops.aten._local_scalar_dense.default and args and isinstance(args[0], FakeTensor):
            t = args[0]
            return True if t.dtype == torch.bool else (1.0 if t.is_floating_point() else 1)
        return func(*args, **(kwargs or {}))


def _scaled_example(example: ExampleInput | torch.Tensor, batch_size: int, device: torch.device) -> ExampleInput:
    """The example with its batch dimension set to ``batch_size``: zeros made inside the active fake mode.

    The batch dimension is dim 0 of the first tensor; every tensor whose dim 0
    has that size is scaled, the others are kept in shape.
    """
    if isinstance(example, torch.Tensor):
        example = ExampleInput((example,))
    first = next(example.tensors(), None)
    n = first.shape[0] if first is not None and first.dim() > 0 else None

    def remake(obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            shape = list(obj.shape)
            if n is not None and shape and shape[0] == n:
                shape[0] = batch_size
            return torch.zeros(shape, dtype=obj.dtype, device=device)
        if isinstance(obj, (tuple, list)):
            return type(obj)(remake(o) for o in obj)
        if isinstance(obj, dict):
            return {k: remake(v) for k, v in obj.items()}
        return obj

    return ExampleInput(remake(tuple(example.args)), remake(dict(example.kwargs)))


def _fake_device(model: nn.Module, device: str | torch.device | None) -> torch.device:
    """The device the fake forward runs as: ``device``, else the model's; ``cpu`` for ``meta`` or a CUDA
    device on a machine without CUDA (autocast and attention kernels are chosen by what is there)."""
    dev = torch.device(device) if device is not None else model_device_dtype(model)[0]
    if dev.type == "meta" or (dev.type == "cuda" and not torch.cuda.is_available()):
        return torch.device("cpu")
    return dev


@contextmanager
def _quiet_fake_kernel_errors() -> Iterator[None]:
    """Within the block, this thread's "failed while attempting to run meta" tracebacks of FakeTensorMode's logger
    are not printed: the same error is raised to the caller, who says it in one line (a shape the model does not
    take is the usual cause)."""
    import logging
    import threading

    logger = logging.getLogger("torch._subclasses.fake_tensor")
    me = threading.get_ident()

    def drop(record: logging.LogRecord) -> bool:
        return record.thread != me

    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


class _BlockInputs:
    """The storages each of ``blocks`` is called with (positional and keyword tensors), by forward pre-hooks.

    ``inputs[i]`` is ``{storage key: bytes}`` of block ``i``'s call (its first call, when it runs twice);
    the tensors are kept referenced until :meth:`remove`, so no storage address is reused meanwhile.
    """

    def __init__(self, blocks: list[nn.Module], skip: set):
        self.inputs: list[dict] = [{} for _ in blocks]
        self._skip, self._kept = skip, []
        self._handles = [b.register_forward_pre_hook(self._hook(i), with_kwargs=True) for i, b in enumerate(blocks)]

    def _hook(self, i: int):
        def record(_module, args, kwargs):
            if self.inputs[i]:
                return None
            for t in tree_leaves((args, kwargs)):
                if isinstance(t, torch.Tensor):
                    key = _storage_key(t)
                    if key not in self._skip:
                        self._kept.append(t)
                        self.inputs[i][key] = t.untyped_storage().nbytes()
            return None
        return record

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._kept.clear()


def _fake_activations(model: nn.Module, example, batch_size: int, precision: str,
                      device: torch.device, grad: dict[int, bool],
                      blocks: list[nn.Module] = ()) -> tuple[dict, str, dict, list[dict]]:
    """``({module: saved bytes}, example description, {storage: (module, bytes)}, block inputs)`` of one fake
    training forward on ``device``.

    ``grad`` maps ``id(parameter)`` to the ``requires_grad`` its fake twin gets; ``blocks``: the modules whose
    inputs are recorded (:class:`_BlockInputs`).
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    from workbench.core.fake_tensors import FAKE_TENSOR_LOCK

    named_p = dict(model.named_parameters())
    named_b = dict(model.named_buffers())
    modes = [(m, m.training) for m in model.modules()]
    mha = torch.backends.mha
    was_fast = mha.get_fastpath_enabled()
    dtype = PRECISIONS[precision]
    try:
        # allow_non_fake_inputs: a tensor kept as a plain attribute (not a parameter or buffer) is faked on use
        with FAKE_TENSOR_LOCK, FakeTensorMode(allow_non_fake_inputs=True), _FakeScalars(), \
                _quiet_fake_kernel_errors():
            state = {}
            for name, p in named_p.items():
                state[name] = torch.empty_strided(p.shape, p.stride(), dtype=p.dtype,
                                                  device=device).requires_grad_(grad[id(p)])
            for name, b in named_b.items():
                state[name] = torch.zeros(b.shape, dtype=b.dtype, device=device)
            call = _scaled_example(example, batch_size, device)
            model.train()
            mha.set_fastpath_enabled(False)
            exclude = [*state.values(), *named_p.values(), *named_b.values()]
            storages: dict = {}
            recorder = _BlockInputs(list(blocks), {_storage_key(t) for t in exclude})
            try:
                with saved_tensor_bytes(model, exclude=exclude, storages=storages) as counts:
                    with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                        out = torch.func.functional_call(model, state, tuple(call.args), dict(call.kwargs),
                                                         strict=False)
                    del out  # the graph (and what it saved) goes with it
                    inputs = recorder.inputs
            finally:
                recorder.remove()
    finally:
        mha.set_fastpath_enabled(was_fast)
        for m, training in modes:
            m.training = training
    return dict(counts), call.describe(), storages, inputs


def estimate_memory(
    model: nn.Module,
    example: ExampleInput | torch.Tensor,
    *,
    batch_size: int,
    optimizer: str = "adamw",
    precision: str = "fp32",
    momentum: float = 0.9,
    trainable: set[str] | None = None,
    device: str | torch.device | None = None,
    activation_checkpointing: bool = False,
) -> MemoryEstimate:
    """Estimate the memory of a training step of ``model``, per module, without running on the device.

    Parameters
    ----------
    model : nn.Module
        Any module, on any device (``meta`` included). It is run once on fake
        tensors: its parameters are swapped for fake ones for the call
        (``torch.func.functional_call``) and its training flags set and restored,
        so do not train it at the same time.
    example : ExampleInput or Tensor
        What the model is called with; its batch dimension (dim 0 of its first
        tensor) is set to ``batch_size``. Only shapes and dtypes are read.
    batch_size : int
        Samples per step (>= 1).
    optimizer : {"adamw", "adam", "sgd", "rmsprop"}
        Its state sizes are :data:`OPTIMIZER_STATES`.
    precision : {"fp32", "bf16", "fp16"}
        ``"bf16"`` / ``"fp16"`` is autocast mixed precision: parameters,
        gradients and optimizer states stay in the parameters' dtype.
    momentum : float
        SGD / RMSprop momentum (a run's default is 0.9); 0 means no momentum buffer.
    trainable : set of str, optional
        Qualified parameter names to treat as trainable (e.g. a planned freeze);
        default: the parameters' live ``requires_grad``, which are never
        changed. Gradients, optimizer state and the fake forward follow it.
    device : str or torch.device, optional
        The device the run will train on; the fake tensors take its type, so
        autocast and the attention kernel are the ones it would pick (on
        CUDA, flash attention saves far less than the math path). Default:
        the model's device. ``meta``, and CUDA on a machine without it, run as ``cpu``.
    activation_checkpointing : bool
        Count the activations a run with ``activation_checkpointing = true`` keeps: outside the checkpointed
        blocks as without it, each block's inputs, and one block's recomputation at a time (Chen et al. 2016;
        :mod:`~workbench.core.model.memory_checkpointing`). A model without blocks to checkpoint is counted
        as without (``checkpointed_blocks == 0``).

    Returns
    -------
    MemoryEstimate

    Raises
    ------
    ValueError
        ``batch_size < 1``, an unknown optimizer or precision, or an example without tensors.
    RuntimeError
        Or any error of the model's own forward on the fake input (a shape it
        does not take), unchanged.
    """
    if batch_size < 1:
        raise ValueError(f"batch size {batch_size} must be at least 1")
    if optimizer not in OPTIMIZER_STATES:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose {', '.join(OPTIMIZER_STATES)}")
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose {', '.join(PRECISIONS)}")
    states = OPTIMIZER_STATES[optimizer][1 if momentum > 0 else 0]

    grad: dict[int, bool] = {}  # id(parameter) -> trainable; a tied parameter is trainable under any name
    for name, p in model.named_parameters(remove_duplicate=False):
        grad[id(p)] = grad.get(id(p), False) or (p.requires_grad if trainable is None else name in trainable)
    dev = _fake_device(model, device)
    blocks = [m for _, m in checkpointed_blocks(model)]
    saved, described, storages, inputs = _fake_activations(model, example, batch_size, precision, dev, grad,
                                                           blocks)
    kept = checkpointed_activations(storages, inputs, blocks)
    if activation_checkpointing and blocks:
        saved = dict(kept.own)
        saved[None] = saved.get(None, 0) + kept.recompute_bytes  # one block at a time: the root's own
    own: dict[str, list[int]] = {}
    names: dict[int, str] = {}
    seen: set[int] = set()
    for name, module in model.named_modules():
        names[id(module)] = name
        entry = own[name] = [0, 0, 0, 0]
        for p in module.parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            nbytes = p.numel() * p.element_size()
            entry[0] += nbytes
            if grad[id(p)]:
                entry[1] += nbytes
                entry[2] += states * nbytes
    for module, nbytes in saved.items():
        key = names.get(id(module), "") if module is not None else ""
        own[key][3] += nbytes
    # Inclusive sums, bottom-up: a name's parent is its prefix before the last dot.
    for name in reversed(list(own)):
        if name:
            parent = name.rpartition(".")[0]
            while parent not in own and parent:
                parent = parent.rpartition(".")[0]
            for i in range(4):
                own[parent][i] += own[name][i]
    modules = {name: ModuleMemory(*vals) for name, vals in own.items()}
    on = bool(activation_checkpointing and blocks)
    return MemoryEstimate(modules, batch_size, optimizer, momentum if states else 0.0, precision, described,
                          dev.type, activation_checkpointing=bool(activation_checkpointing),
                          checkpointed_blocks=len(blocks), recompute_bytes=kept.recompute_bytes if on else 0,
                          activations_checkpointed_bytes=kept.total_bytes if blocks else modules[""].activations_bytes)


def device_memory(device: str | torch.device) -> tuple[int, int]:
    """``(available, total)`` bytes of ``device``'s memory.

    CUDA: ``torch.cuda.mem_get_info`` (free, total). CPU (and anything else):
    ``MemAvailable`` and ``MemTotal`` of ``/proc/meminfo``.

    Raises
    ------
    OSError
        No ``/proc/meminfo`` (not Linux) for a CPU device.
    """
    dev = torch.device(device)
    if dev.type == "cuda":
        free, total = torch.cuda.mem_get_info(dev)
        return int(free), int(total)
    values = {}
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                values[key] = int(parts[0]) * 1024  # the file's unit is kB (KiB)
    if "MemAvailable" not in values or "MemTotal" not in values:
        raise OSError("/proc/meminfo has no MemAvailable / MemTotal")
    return values["MemAvailable"], values["MemTotal"]


def fit_summary(estimate: MemoryEstimate, device: str | torch.device,
                available: int | None = None) -> str:
    """One line: the estimate's total against the device's memory, and what would make it fit.

    Parameters
    ----------
    estimate : MemoryEstimate
    device : str or torch.device
        ``"cuda:0"``, ``"cpu"``... (its memory from :func:`device_memory`).
    available : int, optional
        Bytes available, instead of asking the device (tests, a remote host's figure).

    Returns
    -------
    str
        ``"Needs 2.10 GB of 8.00 GB available on cuda:0: fits."`` or, when it does
        not fit within :data:`FIT_HEADROOM` of what is available, the same
        followed by the changes that would each make it fit: a batch size
        (with gradient accumulation to keep the effective batch), activation
        checkpointing, bf16 autocast, LoRA (frozen base), FSDP over N GPUs.
        Never raises: a device whose memory cannot be read is said so.
    """
    from workbench.core.formatting import format_bytes

    root = estimate.root
    dev = str(device)
    if available is None:
        try:
            available = device_memory(device)[0]
        except (OSError, RuntimeError, ValueError) as exc:
            return f"Needs {format_bytes(root.total_bytes)} on {dev}; its free memory could not be read ({exc})."
    budget = int(available * FIT_HEADROOM)
    head = f"Needs {format_bytes(root.total_bytes)} of {format_bytes(available)} available on {dev}"
    if root.total_bytes <= budget:
        return head + ": fits."
    ideas = [long for _short, long in _fit_ideas(estimate, budget)]
    if not ideas:
        return head + ": does not fit, even with a batch of 1; use a device with more memory."
    return head + ": does not fit. It would fit with: " + "; ".join(ideas) + "."


def _fit_ideas(estimate: MemoryEstimate, budget: int) -> list[tuple[str, str]]:
    """``(short, long)`` wording of each change that would make ``estimate`` fit in ``budget`` bytes."""
    from workbench.core.formatting import format_bytes

    root = estimate.root
    static = root.params_bytes + root.grads_bytes + root.optimizer_bytes
    per_sample = root.activations_bytes / estimate.batch_size
    ideas = []
    if static < budget and per_sample > 0:
        batch = int((budget - static) // per_sample)
        if batch >= 1:
            steps = math.ceil(estimate.batch_size / batch)
            ideas.append((f"batch {batch} x {steps} accumulated",
                          f"batch {batch} with accumulate_grad_batches = {steps} (effective batch {batch * steps})"))
    ckpt = estimate.activations_checkpointed_bytes
    if not estimate.activation_checkpointing and estimate.checkpointed_blocks and ckpt < root.activations_bytes \
            and static + ckpt <= budget:
        ideas.append(("activation checkpointing",
                      f"activation checkpointing (keeps each of the {estimate.checkpointed_blocks} blocks' inputs "
                      f"and recomputes one block at a time: activations {format_bytes(ckpt)} instead of "
                      f"{format_bytes(root.activations_bytes)})"))
    if estimate.precision == "fp32" and root.activations_bytes and static + root.activations_bytes // 2 <= budget:
        ideas.append(("bf16", "bf16 autocast (about half the activations)"))
    if root.grads_bytes:
        base = root.params_bytes + root.activations_bytes
        if base <= budget:
            ideas.append(("LoRA", "LoRA or freezing most layers (no gradients or optimizer state for the frozen "
                                  f"weights: about {format_bytes(base)})"))
    if static:
        room = budget - root.activations_bytes
        if room > 0:
            gpus = math.ceil(static / room)
            if gpus > 1:
                ideas.append((f"FSDP over {gpus} GPUs",
                              f"FSDP over {gpus} GPUs (parameters, gradients and optimizer state sharded)"))
    return ideas


def fit_line(estimate: MemoryEstimate, device: str | torch.device, available: int | None = None) -> str:
    """The short form of :func:`fit_summary`, for one line before Start.

    Parameters
    ----------
    estimate : MemoryEstimate
    device : str or torch.device
        ``"cuda:0"``, ``"cpu"`` (CPU: the system's available RAM, :func:`device_memory`).
    available : int, optional
        Bytes available, instead of asking the device.

    Returns
    -------
    str
        ``"Memory: 1.21 GB of 79.6 GB free on cuda:0 — fits"``, or ``"… — does not fit: try batch 8 x 4
        accumulated, activation checkpointing, bf16, LoRA"`` (the changes that would each make it fit, as
        :func:`fit_summary` words them in full). Never raises.
    """
    from workbench.core.formatting import format_bytes

    need = format_bytes(estimate.total_bytes)
    if available is None:
        try:
            available = device_memory(device)[0]
        except (OSError, RuntimeError, ValueError):
            return f"Memory: {need} on {device} (its free memory could not be read)"
    budget = int(available * FIT_HEADROOM)
    head = f"Memory: {need} of {format_bytes(available)} free on {device}"
    if estimate.total_bytes <= budget:
        return head + " — fits"
    ideas = [short for short, _long in _fit_ideas(estimate, budget)]
    if not ideas:
        return head + " — does not fit, even with a batch of 1"
    return head + " — does not fit: try " + ", ".join(ideas)


def meta_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model``'s structure whose parameters and buffers are on ``meta``, without its hooks.

    What :func:`estimate_memory` needs from a model the caller keeps using
    (training it, showing it) while the estimate runs on another thread: the
    same modules, shapes, dtypes, ``requires_grad`` flags and tied parameters
    (one meta twin per tensor), and no data. Forward / backward / state-dict
    hooks of the original (a probe's, a lazy loader's) are left out, so the
    copy's forward is the modules' own. Other attributes are deep-copied (a
    Hugging Face ``config``); a plain tensor attribute keeps its values. Call it
    on the thread that owns ``model``; ``model`` is not changed.

    Parameters
    ----------
    model : nn.Module

    Returns
    -------
    nn.Module
        In ``model``'s training mode.

    Raises
    ------
    TypeError, RuntimeError
        An attribute that cannot be deep-copied (the message of ``copy.deepcopy``).
    """
    memo: dict[int, Any] = {}
    named = itertools.chain(model.named_parameters(remove_duplicate=False),
                            model.named_buffers(remove_duplicate=False))
    for _name, t in named:
        if id(t) not in memo:
            twin = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")  # metadata only
            memo[id(t)] = nn.Parameter(twin, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else twin
    for module in model.modules():
        for key, value in vars(module).items():
            if "hooks" in key and isinstance(value, dict):
                memo[id(value)] = type(value)()
    return copy.deepcopy(model, memo)
