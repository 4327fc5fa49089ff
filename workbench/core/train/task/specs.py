"""The code a run's settings name (dataset, step, validation step, loss, metrics), for trust and for replay.

A ``run.toml`` may name the user's own code: ``[data] dataset =
"my_data.py:make_dataset"``, ``[task] step = "my_task.py:training_step"``...
Reading such a name is harmless, running it is not, so the trust rule of
:mod:`workbench.core.contrib` applies to each (:func:`check_trust`) before
anything is imported. A run records each file it ran by absolute path and
content hash (``[task] files``, :func:`pin`), so that a replay of the run says
when one of them changed since (:func:`changed_files`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from workbench.core import contrib
from workbench.core.train.config import DATASETS, TrainConfig
from workbench.core.train.task.losses import LOSS_NAMES
from workbench.core.train.task.metrics import BUILTIN_METRICS

__all__ = ["code_specs", "check_trust", "pin", "changed_files", "file_of"]


def code_specs(cfg: TrainConfig) -> list[tuple[str, str, str]]:
    """``(field, contribution kind, spec)`` of every setting of ``cfg`` that names code, in order.

    Built-in names (a built-in dataset, loss or metric) are left out: they are
    Workbench's own. A registered name (an installed package's) is listed; its
    trust check passes without asking.
    """
    out = []
    if cfg.data.dataset not in DATASETS:
        out.append(("data.dataset", "dataset", cfg.data.dataset))
    t = cfg.task
    if t.step:
        out.append(("task.step", "step", t.step))
    if t.validation_step:
        out.append(("task.validation_step", "step", t.validation_step))
    if t.loss and t.loss not in LOSS_NAMES:
        out.append(("task.loss", "loss", t.loss))
    out += [("task.metrics", "metric", m) for m in t.metrics if m not in BUILTIN_METRICS]
    return out


def check_trust(cfg: TrainConfig, origin: str | Path, *, trust: bool) -> None:
    """Apply the trust rule to every code name of ``cfg``, read from the file ``origin``; import nothing.

    Raises
    ------
    TrustRequired
        One names code that is not registered and ``trust`` is False (every such
        spec is named, so one question covers them all).
    DataError or ContributionError
        A spec is not a non-empty string.
    """
    from workbench.core.errors import TrustRequired

    untrusted, roles = [], {}
    for _, kind, spec in code_specs(cfg):
        try:
            contrib.check(kind, spec, origin, trust=trust)
        except TrustRequired:
            untrusted.append(spec)
            roles.setdefault(spec, kind)
    if untrusted:
        raise TrustRequired(origin, untrusted, kind="code", roles=roles)


def file_of(spec: str) -> str | None:
    """The file part of ``"path/file.py:callable"`` (None for ``"pkg.mod:callable"`` and plain names)."""
    target, sep, _ = spec.rpartition(":")
    if not sep or not target:
        return None
    return target if target.endswith(".py") or "/" in target or "\\" in target else None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pin(cfg: TrainConfig, base: str | Path) -> None:
    """Make ``cfg``'s file specs absolute (resolved against ``base``) and record each file's SHA-256.

    A relative CSV ``[data] root`` that names a file in ``base`` becomes absolute too
    (an example folder holds its run.toml and its table side by side), and so do a
    text dataset's ``root``, ``val`` and ``tokenizer``.

    Idempotent: an absolute spec stays, a hash already recorded is kept (so a
    replay keeps the hash of the original run and :func:`changed_files` can
    compare). A missing file is left for the step that imports it to report.
    """
    base = Path(base)

    def absolute(spec: str) -> str:
        f = file_of(spec)
        if f is None:
            return spec
        p = Path(f).expanduser()
        p = p if p.is_absolute() else (base / p).resolve()
        return f"{p}:{spec.rpartition(':')[2]}"

    if cfg.data.dataset not in DATASETS:
        cfg.data.dataset = absolute(cfg.data.dataset)
    root = Path(cfg.data.root).expanduser() if cfg.data.dataset == "csv" and cfg.data.root else None
    if root is not None and not root.is_absolute() and (base / root).is_file():  # a table beside the run file
        cfg.data.root = str((base / root).resolve())
    if cfg.data.dataset == "text":  # the text files and the tokenizer folder, relative to the run file
        for key in ("root", "val", "tokenizer"):
            value = getattr(cfg.data, key)
            p = Path(value).expanduser() if value else None
            if p is not None and not p.is_absolute() and (base / p).exists():
                setattr(cfg.data, key, str((base / p).resolve()))
    t = cfg.task
    t.step = absolute(t.step) if t.step else t.step
    t.validation_step = absolute(t.validation_step) if t.validation_step else t.validation_step
    if t.loss and t.loss not in LOSS_NAMES:
        t.loss = absolute(t.loss)
    t.metrics = [m if m in BUILTIN_METRICS else absolute(m) for m in t.metrics]
    for _, _, spec in code_specs(cfg):
        f = file_of(spec)
        if f is not None and f not in t.files and Path(f).is_file():
            t.files[f] = _sha256(Path(f))


def changed_files(cfg: TrainConfig) -> list[str]:
    """The recorded files (``[task] files``) whose content differs from the recorded hash, or that are gone."""
    out = []
    for f, digest in cfg.task.files.items():
        p = Path(f)
        if not p.is_file():
            out.append(f"{f} (missing)")
        elif _sha256(p) != digest:
            out.append(f"{f} (changed since the run)")
    return out
