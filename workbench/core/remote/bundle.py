"""What a run file needs on another machine: its starting weights, its data files and its code, under relative names.

:func:`bundle` reads a ``run.toml`` and lists each file it names that this
machine has: the checkpoint the run starts from (``[model] init``, or
``checkpoint`` when resuming or without ``init``), the data (``[data] root``,
``val``, ``tokenizer``: a file or a folder), the files of ``file.py:callable``
specs (``[model] arch``, ``[data] dataset``, ``[task] step`` ...) and the
``edits.jsonl`` replayed beside it. The copy of the run file it returns names
them relative to the remote run folder (``inputs/...``, ``code/...``) and
writes the run into ``run/`` there. :func:`stage` lays the bundle out as a
folder of links that one ``rsync --copy-links`` sends.

A path the run file names that this machine lacks is refused, naming the key:
it would point at nothing on the host.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from workbench.core.remote.ssh import RemoteError
from workbench.core.train.config import DATASETS, TrainConfig
from workbench.core.train.task.specs import file_of

__all__ = ["Bundle", "bundle", "stage", "RUN_SUBDIR"]

#: The run folder inside the remote folder of a run (``run_dir`` of the copied run file).
RUN_SUBDIR = "run"
#: Datasets built in memory: their ``[data] root`` is not read.
_NO_FILES = ("digits", "fake")


@dataclass
class Bundle:
    """A run file made ready for another machine.

    Attributes
    ----------
    config : TrainConfig
        The copy: every path relative to the remote run folder, ``run_dir = "run"``.
    files : dict of str to Path
        Name inside the remote run folder (``inputs/init.pt``) -> the file or folder here.
    """

    config: TrainConfig
    files: dict[str, Path] = field(default_factory=dict)

    def add(self, local: Path, folder: str) -> str:
        """Carry ``local`` as ``folder/<its name>`` (a number in front when that name is taken); that name."""
        for name, existing in self.files.items():
            if existing == local:  # one file named twice (a step and a loss in one file) travels once
                return name
        base = local.name or "data"
        name, n = f"{folder}/{base}", 1
        while name in self.files:
            n += 1
            name = f"{folder}/{n}-{base}"
        self.files[name] = local
        return name


def _local(value: str, base: Path) -> Path | None:
    """The file or folder ``value`` names here: relative to the run file's folder first, then the working folder."""
    p = Path(value).expanduser()
    for candidate in ([p] if p.is_absolute() else [base / p, p]):
        if candidate.exists():
            return candidate.resolve()
    return None


def bundle(run_toml: str | Path) -> Bundle:
    """The :class:`Bundle` of ``run_toml``.

    Raises
    ------
    RemoteError
        The run file cannot be read, or a path it names is not on this machine (the key is named).
    """
    path = Path(run_toml)
    try:
        cfg = TrainConfig.from_toml(path)
    except FileNotFoundError:
        raise RemoteError(f"{path}: file not found; give the run file (run.toml) to start") from None
    except (OSError, ValueError) as e:
        raise RemoteError(f"{path}: {e}; fix the run file") from None
    base = path.resolve().parent
    out = Bundle(cfg)

    def carry(key: str, value: str, folder: str) -> str:
        local = _local(value, base)
        if local is None:
            raise RemoteError(f"{path}: {key} = {value!r} is not on this machine; fix the run file (relative paths "
                              f"start at its folder)")
        return out.add(local, folder)

    mc = cfg.model
    start_key = "checkpoint" if (mc.resume or not mc.init) else "init"
    if getattr(mc, start_key):
        setattr(mc, start_key, carry(f"[model] {start_key}", getattr(mc, start_key), "inputs"))
    d = cfg.data
    if d.dataset not in _NO_FILES:
        for key in ("root", "val", "tokenizer"):
            value = getattr(d, key)
            if value and not (key == "root" and d.download and _local(value, base) is None):
                setattr(d, key, carry(f"[data] {key}", value, "inputs"))

    def code(key: str, spec: str) -> str:
        f = file_of(spec) if spec else None
        if f is None:
            return spec
        return f"{carry(key, f, 'code')}:{spec.rpartition(':')[2]}"

    mc.arch = code("[model] arch", mc.arch)
    if d.dataset not in DATASETS:
        d.dataset = code("[data] dataset", d.dataset)
    t = cfg.task
    t.step, t.validation_step = code("[task] step", t.step), code("[task] validation_step", t.validation_step)
    t.loss = code("[task] loss", t.loss)
    t.metrics = [code("[task] metrics", m) for m in t.metrics]
    t.files = {}  # recorded by the run on the host, with the host's paths
    edits = base / "edits.jsonl"
    if edits.is_file():
        out.files["edits.jsonl"] = edits
    cfg.run_dir = RUN_SUBDIR
    return out


def stage(b: Bundle, folder: str | Path) -> Path:
    """Lay ``b`` out in ``folder``: its ``run.toml``, and a link per carried file under its remote name.

    ``rsync --copy-links folder/ host:dest/`` then sends the files themselves.

    Returns
    -------
    Path
        ``folder``.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    b.config.to_toml(folder / "run.toml")
    for name, local in b.files.items():
        link = folder / name
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(local, link)
    return folder
