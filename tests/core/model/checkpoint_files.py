"""Helpers that save real models in every checkpoint form people have.

Import them from any test::

    from tests.core.model.checkpoint_files import make_model, save_all_forms

    model = make_model("resnet18", num_classes=10)
    paths = save_all_forms(model, tmp_path)      # {"state_dict": Path, "lightning": Path, ...}

Every function returns the written path(s). Nothing here downloads anything.
"""

from __future__ import annotations

import os
import pickle
import warnings
from pathlib import Path
from typing import Mapping

import torch
import torchvision
from torch import nn

#: Keys of :func:`save_all_forms` that need ``trust=True`` to open.
TRUSTED_FORMS = ("torchscript", "pickled_module")


def randomize_buffers(model: nn.Module, seed: int = 0) -> nn.Module:
    """Give BatchNorm running statistics non-default values so round trips are meaningful."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if name.endswith("running_mean"):
                buf.copy_(torch.randn(buf.shape, generator=g))
            elif name.endswith("running_var"):
                buf.copy_(torch.rand(buf.shape, generator=g) + 0.5)
            elif name.endswith("num_batches_tracked"):
                buf.fill_(7)
    return model


def small_vit(num_classes: int = 10) -> nn.Module:
    """A 2-layer ViT on 32x32 inputs (about 27k parameters): torchvision's VisionTransformer class."""
    return torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=num_classes
    )


#: Factory spec (``path/file.py:callable``) that builds :func:`small_vit`.
SMALL_VIT_SPEC = f"{Path(__file__).resolve()}:small_vit"


def make_model(name: str = "resnet18", seed: int = 0, **kwargs) -> nn.Module:
    """Build a torchvision model (or ``"small_vit"``) with seeded random weights and buffers, in eval mode."""
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = small_vit(**kwargs) if name == "small_vit" else torchvision.models.get_model(name, weights=None, **kwargs)
    return randomize_buffers(model, seed).eval()


def _state_dict(model_or_sd: nn.Module | Mapping[str, torch.Tensor], prefix: str = "") -> dict:
    sd = model_or_sd.state_dict() if isinstance(model_or_sd, nn.Module) else dict(model_or_sd)
    return {prefix + k: v for k, v in sd.items()}


def save_state_dict(model, path: str | Path, prefix: str = "", legacy: bool = False) -> Path:
    """``torch.save(model.state_dict())`` with every key prefixed (``"module."`` for DataParallel).

    ``legacy=True`` writes the pre-1.6 non-zip format (``_use_new_zipfile_serialization=False``).
    """
    path = Path(path)
    torch.save(_state_dict(model, prefix), path, _use_new_zipfile_serialization=not legacy)
    return path


def optimizer_for(model: nn.Module, kind: str = "adamw") -> torch.optim.Optimizer:
    """An optimizer that has taken one step, so its state holds tensors."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=3e-4, weight_decay=0.05) if kind == "adamw" else torch.optim.SGD(params, lr=0.1, momentum=0.9)
    for p in params:
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return opt


def save_training_dict(
    model: nn.Module, path: str | Path, key: str = "model_state_dict", *, epoch: int = 3, loss: float = 0.25,
    optimizer: str | None = "adamw", prefix: str = "",
) -> Path:
    """The PyTorch tutorial layout ``{'epoch', key: state_dict, 'optimizer_state_dict', 'loss'}``.

    The optimizer state comes from a copy of the model so ``model``'s weights are unchanged.
    """
    import copy

    payload = {"epoch": epoch, key: _state_dict(model, prefix), "loss": loss}
    if optimizer:
        payload["optimizer_state_dict"] = optimizer_for(copy.deepcopy(model), optimizer).state_dict()
    path = Path(path)
    torch.save(payload, path)
    return path


def save_lightning(model: nn.Module, path: str | Path, wrapper: str = "model.") -> Path:
    """A PyTorch Lightning style ``.ckpt``: keys prefixed by the LightningModule attribute (``model.``)."""
    import copy

    opt = optimizer_for(copy.deepcopy(model), "sgd")
    payload = {
        "epoch": 4,
        "global_step": 500,
        "pytorch-lightning_version": "2.4.0",
        "state_dict": _state_dict(model, wrapper),
        "optimizer_states": [opt.state_dict()],
        "lr_schedulers": [{"step_size": 10, "gamma": 0.1, "base_lrs": [0.1], "last_epoch": 4}],
        "hyper_parameters": {"lr": 0.1, "num_classes": 10},
        "loops": {},
        "callbacks": {},
    }
    path = Path(path)
    torch.save(payload, path)
    return path


def save_safetensors(model, path: str | Path, metadata: dict[str, str] | None = None, prefix: str = "") -> Path:
    """``safetensors.torch.save_file`` (contiguous copies) with optional ``__metadata__``."""
    from safetensors.torch import save_file

    sd = {k: v.detach().contiguous().clone() for k, v in _state_dict(model, prefix).items()}
    path = Path(path)
    save_file(sd, str(path), metadata=metadata)
    return path


def save_torchscript(model: nn.Module, path: str | Path, example: torch.Tensor) -> Path:
    """``torch.jit.trace`` + ``torch.jit.save`` (deprecation warnings silenced)."""
    path = Path(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(model.eval(), example, check_trace=False)
        torch.jit.save(traced, str(path))
    return path


def save_pickled_module(model: nn.Module, path: str | Path, legacy: bool = False) -> Path:
    """``torch.save(model)``: the whole module pickled (needs trust to open)."""
    path = Path(path)
    torch.save(model, path, _use_new_zipfile_serialization=not legacy)
    return path


class RunsCommand:
    """Unpickling this calls ``os.system(command)``: the classic malicious pickle."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def save_malicious(path: str | Path, marker: str | Path, legacy: bool = False) -> Path:
    """A checkpoint whose unpickling would ``touch marker``; the marker must never appear.

    ``legacy=False`` writes a ``torch.save`` zip (``data.pkl``); ``legacy=True`` a raw pickle.
    """
    path = Path(path)
    payload = {"model_state_dict": {"w": torch.zeros(2)}, "hook": RunsCommand(f"touch {marker}")}
    if legacy:
        path.write_bytes(pickle.dumps(payload, protocol=2))
    else:
        torch.save(payload, path)
    return path


def example_input(name: str) -> torch.Tensor:
    """An input batch ``(1, 3, H, W)`` for ``make_model(name)``."""
    size = 32 if name == "small_vit" else 64
    return torch.randn(1, 3, size, size)


def save_all_forms(model: nn.Module, folder: str | Path, example: torch.Tensor | None = None) -> dict[str, Path]:
    """Save ``model`` in every supported form; returns ``{form: path}``.

    Forms: ``state_dict``, ``state_dict_legacy``, ``module_prefix`` (DataParallel),
    ``compiled_prefix`` (``_orig_mod.``), ``ddp_compiled_prefix`` (``module._orig_mod.``),
    ``training_dict`` and ``training_<key>`` for each of ``state_dict, model, net,
    model_state, ema, weights``, ``lightning``, ``safetensors``, and, when
    ``example`` is given (an input batch for tracing), ``torchscript``; always
    ``pickled_module``. Suffixes are deliberately misleading for a few forms
    (content decides the format, not the name).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = {
        "state_dict": save_state_dict(model, folder / "weights.pth"),
        "state_dict_legacy": save_state_dict(model, folder / "legacy.pt", legacy=True),
        "module_prefix": save_state_dict(model, folder / "dp.pt", prefix="module."),
        "compiled_prefix": save_state_dict(model, folder / "compiled.bin", prefix="_orig_mod."),
        "ddp_compiled_prefix": save_state_dict(model, folder / "ddp_compiled.pt", prefix="module._orig_mod."),
        "training_dict": save_training_dict(model, folder / "checkpoint.tar"),
        "lightning": save_lightning(model, folder / "epoch=4-step=500.ckpt"),
        "safetensors": save_safetensors(model, folder / "model.safetensors", metadata={"format": "pt", "note": "test"}),
        "pickled_module": save_pickled_module(model, folder / "full_model.pt"),
    }
    for key in ("state_dict", "model", "net", "model_state", "ema", "weights"):
        out[f"training_{key}"] = save_training_dict(model, folder / f"train_{key}.pt", key=key, optimizer=None)
    if example is not None:
        out["torchscript"] = save_torchscript(model, folder / "scripted.pt", example)
    return out


class TiedDigits(nn.Module):
    """A language-model-shaped toy for tied weights: the decoder ``nn.Linear`` shares ``embedding.weight``.

    Input: digits images ``(N, 1, 8, 8)``; output: 64 logits (the digits' 10
    classes are indices below 64). Parameters: ``embedding.weight`` (64, 10) held
    by both ``embedding`` and ``decoder``, ``hidden`` (10 -> 10), ``decoder.bias`` (64):
    814 in all, each counted once.
    """

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(64, 10)
        self.hidden = nn.Linear(10, 10)
        self.decoder = nn.Linear(10, 64)
        self.decoder.weight = self.embedding.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.hidden(x.flatten(1) @ self.embedding.weight))
        return self.decoder(h)


def tied_digits() -> nn.Module:
    """Factory of :class:`TiedDigits` for an ``ArchSpec("<this file>:tied_digits")``."""
    return TiedDigits()


TIED_SPEC = f"{Path(__file__).resolve()}:tied_digits"
