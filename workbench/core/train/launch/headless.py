"""Headless training: ``workbench train RUN.toml`` (:func:`train_from_toml`) and its printing.

Builds the model of a run file's ``[model]`` section
(:func:`model_from_config`), trains it with the
trainer :func:`workbench.core.train.entry.make_trainer` builds (the window's
training process builds it there too) and prints one line per epoch. Qt-free.
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from torch import nn

from workbench.core.errors import TrainingError, WorkbenchError
from workbench.core.run_folder.printable import printable
from workbench.core.model.meta_build import build_module
from workbench.core.model.spec import ArchSpec
from workbench.core.model.edits import apply_edits
from workbench.core.model.freezing import apply_frozen
from workbench.core.model.names import UnknownPathError
from workbench.core.model.opening import NeedsArchitecture, open_model
from workbench.core.train.config import ModelConfig, TrainConfig
from workbench.core.train.devices import available_devices
from workbench.core.train.trainer.edit_log import EDITS_FILE, ReplayEdits, read_edits
from workbench.core.train.entry import make_trainer, save_last
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.data.loaders import input_wait_text
from workbench.core.train.task import specs as task_specs
from workbench.core.train.task.from_model import model_for_task

if TYPE_CHECKING:  # pragma: no cover
    from workbench.core.train.trainer.loop import Trainer

__all__ = ["settle_run_file", "fill_table_model_kwargs", "train_from_toml", "lr_find_from_toml", "lr_find_dir", "model_from_config", "check_run_trust",
           "PrintProgress", "error_text"]


#: Seconds between two progress lines of ``workbench train`` (step, samples/s, ETA): a long epoch says where it
#: is, and a log file (a detached run's train.log) gets a few lines a minute, not one per step.
PROGRESS_EVERY_S = 10.0


def _duration(seconds: float) -> str:
    """``1:02:03`` / ``2:03`` (H:MM:SS or M:SS); ``?`` when not finite."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    s = int(round(seconds))
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


class PrintProgress(Callback):
    """One line per epoch (and the start/end) for ``workbench train``, and a progress line at most every
    :data:`PROGRESS_EVERY_S` between them (step N/M, loss, samples/s, ETA of the steps left).

    Parameters
    ----------
    out : callable
        Takes one line of text.
    debug : bool
        Also print the traceback of an error that is not a WorkbenchError
        (``--debug``); by default an error is the one ``error: ...`` line.
    """

    def __init__(self, out: Callable[[str], Any], debug: bool = False):
        self.out = out
        self.debug = debug
        self._start: tuple[float, int, int] = (time.monotonic(), 0, 0)  # (time, step, samples) at the fit start
        self._last_line = (time.monotonic(), 0)  # (time, samples) of the last progress line

    def on_fit_start(self, trainer):
        now = time.monotonic()
        self._start = (now, int(getattr(trainer, "step", 0)), int(getattr(trainer, "samples", 0)))
        self._last_line = (now, self._start[2])
        info = trainer.info
        for note in getattr(info, "notes", None) or []:
            self.out(f"data: {note}")
        trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        total = sum(p.numel() for p in trainer.model.parameters())
        self.out(f"run folder: {trainer.run_dir}")
        self.out(f"device {trainer.device}, {trainer.config.epochs} epochs x {len(trainer.train_loader)} steps, "
                 f"{trainable:,} of {total:,} parameters trainable")
        if trainer.loader_note:
            self.out(f"data: {trainer.loader_note}" + (", channels_last" if trainer.channels_last else ""))

    def on_metrics(self, trainer, batch):
        now = time.monotonic()
        if not batch or now - self._last_line[0] < PROGRESS_EVERY_S:
            return
        rec = batch[-1]
        step, samples = int(rec["step"]), int(rec["samples"])
        total = getattr(trainer, "total_steps", None) or trainer.config.epochs * len(trainer.train_loader)
        rate = (samples - self._last_line[1]) / max(now - self._last_line[0], 1e-9)
        t0, step0, _ = self._start
        per_step = (now - t0) / max(step - step0, 1)
        loss = float(rec["loss"])
        self.out(f"step {step}/{total}  epoch {int(rec['epoch']) + 1}/{trainer.config.epochs}  "
                 + (f"loss {loss:.4f}  " if math.isfinite(loss) else "")
                 + f"{rate:.0f} samples/s  ETA {_duration((total - step) * per_step)}")
        self._last_line = (now, samples)

    def on_epoch_end(self, trainer, m):
        acc = f"  val_acc {m['val_acc'] * 100:.1f}%" if math.isfinite(m["val_acc"]) else ""
        acc += "".join(f"  {k} {v:.4g}" for k, v in m.items()  # the task's other metrics (val_r2, train_iou...)
                       if k.startswith(("val_", "train_")) and k not in ("val_loss", "val_acc", "train_loss")
                       and isinstance(v, float) and math.isfinite(v))
        self.out(f"epoch {m['epoch'] + 1}/{trainer.config.epochs}  step {m['step']}  "
                 f"train_loss {m['train_loss']:.4f}  val_loss {m['val_loss']:.4f}{acc}  "
                 f"lr {m['lr']:.3g}  {m['samples_per_s']:.0f} samples/s  {m['epoch_time']:.1f} s"
                 + (f"  {wait}" if (wait := input_wait_text(m.get("input_wait", math.nan), trainer.device.type))
                    else "")
                 + ("  (best)" if m["best"] else ""))
        skipped = m.get("skipped") or []
        if skipped:
            self.out(f"skipped {len(skipped)} unreadable image(s) in epoch {m['epoch'] + 1}:")
            for name in skipped:
                self.out(f"  {name}")

    def on_exception(self, trainer, exc, tb):
        if self.debug and not isinstance(exc, WorkbenchError):
            self.out(tb.rstrip())
        self.out(error_line(f"{error_text(exc)}"))

    def on_fit_end(self, trainer, reason):
        if reason == "nonfinite" and trainer.error is not None:
            self.out(error_line(f"{trainer.error}"))
        self.out(f"finished: {reason}")


def error_line(text: str) -> str:
    """``error: <text>`` with control characters escaped (file names and specs come from files)."""
    return f"error: {printable(text)}"


def error_text(exc: BaseException) -> str:
    """One line for an error of a run: what, which file, what to do (no traceback).

    A disk error names the file and says to free space or choose a writable
    ``run_dir``; a WorkbenchError's message already says what to do; anything
    else is ``<type>: <message>``.
    """
    if isinstance(exc, WorkbenchError):
        return str(exc)
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return (f"{where}{exc.strerror or exc}: the run folder could not be written; free disk space or set "
                "run_dir in the run file to a writable folder")
    return f"{type(exc).__name__}: {exc}"


def model_from_config(mc: ModelConfig, base: Path | None = None, *, trust: bool = False,
                      origin: Path | None = None) -> tuple[nn.Module, ArchSpec | None]:
    """Build the model a ``[model]`` section starts from, through the one open policy.

    The starting weights are ``init`` (the ``init.pt`` every run writes beside its
    run.toml: the exact weights, frozen set and architecture it started from),
    else ``checkpoint``; the architecture is ``arch`` + ``kwargs`` with ``edits``
    made before the weights go in (:func:`workbench.core.model.opening.open_model`).
    Without a file, ``arch`` is built freshly initialized.

    The run file is a file like any other: an ``arch`` that names code which is
    not a registered architecture (``pkg.mod:fn``, ``file.py:fn``), or a
    starting checkpoint that does, is built only with ``trust``
    (:mod:`workbench.core.contrib`); a relative ``file.py`` path
    resolves against the run file's folder.

    Parameters
    ----------
    mc : ModelConfig
    base : Path, optional
        The run file's folder: relative ``init`` / ``checkpoint`` paths start there.
    trust : bool
        The user agreed to run code the run file (or its checkpoint) names
        (``workbench train --trust``).
    origin : Path, optional
        The run file, named in errors (default ``base / "run.toml"``).

    Returns
    -------
    (model, spec)

    Raises
    ------
    TrustRequired
        The run file or its starting checkpoint names code and ``trust`` is False;
        nothing it names ran.
    WorkbenchError
        Unknown architecture, a missing or unreadable file, weights that do not fit.
    """
    origin = Path(origin) if origin is not None else (base or Path.cwd()) / "run.toml"
    spec = ArchSpec.from_file({"name": mc.arch, "kwargs": mc.kwargs}, origin, trust=trust) if mc.arch else None
    path = start_file(mc, base)
    if path is None:
        if spec is None:
            raise TrainingError("the run file names no architecture: set [model] arch (e.g. \"digits_cnn\")")
        model = build_module(spec)
        apply_edits(model, list(mc.edits))
    else:
        if not path.exists():
            raise TrainingError(f"{path}: file not found; fix [model] {'init' if mc.init else 'checkpoint'} "
                                "in the run file")
        try:
            opened = open_model(path, spec, edits=list(mc.edits), trust=trust)
        except NeedsArchitecture as e:
            raise TrainingError(f"{e}; set [model] arch in the run file") from e
        model, spec = opened.model, opened.spec or spec
    try:
        # A listed frozen set is exact (the window writes every frozen name, LoRA's base weights too);
        # an empty one adds nothing: what the edits froze (add_lora freezes the layer it wraps) stays frozen.
        if mc.frozen:
            apply_frozen(model, list(mc.frozen))
    except UnknownPathError as e:
        raise TrainingError(f"[model] frozen: {e}") from e
    return model, spec


def start_file(mc: ModelConfig, base: Path | None) -> Path | None:
    """The checkpoint a ``[model]`` section starts from: ``checkpoint`` when resuming, else ``init``, else
    ``checkpoint``; relative paths start at ``base`` (the run file's folder). None: built fresh from ``arch``."""
    start = mc.checkpoint if mc.resume else (mc.init or mc.checkpoint)
    if not start:
        return None
    path = Path(start).expanduser()
    path = base / path if not path.is_absolute() and base is not None else path
    if mc.resume and path.with_name(path.stem + ".dcp").is_dir() and path.with_name("init.pt").is_file():
        # an FSDP run's sharded checkpoint holds no whole weights: the model is built from its run's
        # init.pt (architecture, whole weights); the resume then loads the shards (strategy = "fsdp")
        return path.with_name("init.pt")
    return path


def check_run_trust(path: str | Path, *, trust: bool = False) -> None:
    """Refuse, before any process starts, a run file that names code without ``trust``.

    What :func:`model_from_config` would refuse in each rank, checked once by
    the launcher of a data-parallel run so that no rank starts for nothing. A
    run file that cannot be read is left to the ranks to report.

    Raises
    ------
    TrustRequired
        The run file's ``[model] arch``, its dataset, step, loss or metric specs
        (:func:`workbench.core.train.task.specs.check_trust`), or the ``arch``
        entry of the checkpoint it starts from, names code that is not
        registered, or that checkpoint is a pickle needing trust. Nothing it named ran.
    CheckpointError
        The starting checkpoint cannot be read (corrupt, unreadable).
    """
    from workbench.core.model.formats import read_checkpoint

    path = Path(path)
    try:
        cfg = TrainConfig.from_toml(path)
    except (OSError, ValueError, TypeError):
        return
    task_specs.check_trust(cfg, path, trust=trust)
    mc = cfg.model
    if mc.arch:
        ArchSpec.from_file({"name": mc.arch, "kwargs": mc.kwargs}, path, trust=trust)
    start_path = start_file(mc, path.parent)
    if start_path is None or not start_path.is_file():
        return
    ckpt = read_checkpoint(start_path, trust=trust)  # a pickle needing trust is refused here too
    if not mc.arch and ckpt.metadata.arch:
        ArchSpec.from_file(ckpt.metadata.arch, ckpt.path, trust=trust)


def settle_run_file(cfg: TrainConfig, path: Path, *, trust: bool, out: Callable[[str], Any] | None = None) -> None:
    """What a run file's task and data settings need before its model is built (every rank does it).

    The trust rule on the code it names (nothing imported before), its file specs
    made absolute against the file's folder with their hashes, a note through
    ``out`` for each file changed since the run that wrote it, and the table's
    sizes for ``tabular_mlp`` (:func:`fill_table_model_kwargs`).

    Raises
    ------
    TrustRequired
        It names unregistered code and ``trust`` is False.
    DataError
        The table cannot be read.
    """
    task_specs.check_trust(cfg, path, trust=trust)
    task_specs.pin(cfg, path.parent)
    for line in task_specs.changed_files(cfg) if out is not None else ():
        out(f"note: {line}: the replay runs the file as it is now")
    fill_table_model_kwargs(cfg)


def fill_table_model_kwargs(cfg: TrainConfig) -> None:
    """``[model] arch = "tabular_mlp"`` without ``in_features``: its sizes from the data (the features, the outputs).

    The table is read once more than the run itself reads it (1M rows x 20 columns:
    ~1.7 s here); ``cfg.model.kwargs`` then records the sizes, so the run.toml the
    run writes builds the same model without reading the data first.

    Raises
    ------
    DataError
        The table cannot be read.
    """
    if cfg.model.arch != "tabular_mlp" or "in_features" in cfg.model.kwargs:
        return
    from workbench.core.train.data.datasets import build_datasets

    _, _, info = build_datasets(cfg.data, task=cfg.task.kind)
    outputs = int(info.num_classes) or int(info.target_shape[0] if info.target_shape else 1)
    cfg.model.kwargs = {**cfg.model.kwargs, "in_features": int(info.input_shape[0]), "num_outputs": outputs}


def trainer_from_toml(path: str | Path, out: Callable[[str], Any] = print, callbacks=(), *,
                      trust: bool = False) -> Trainer | None:
    """The :class:`Trainer` a run.toml describes (the same one ``workbench train`` runs), or None.

    Errors (a missing file, a wrong key, a device this machine lacks, a model
    that cannot be built) are printed through ``out`` and give None.
    """
    path = Path(path)
    try:
        cfg = TrainConfig.from_toml(path)
    except FileNotFoundError:
        out(error_line(f"{path}: file not found"))
        return None
    except ValueError as e:  # names the file, the key and what it takes
        out(error_line(f"{e}"))
        return None
    except (OSError, TypeError) as e:
        out(error_line(f"{path}: {e}"))
        return None
    available = [d for d, _ in available_devices()]
    if cfg.device not in available and not (cfg.device == "cuda" and any(d.startswith("cuda") for d in available)):
        out(error_line(f"{path}: device = {cfg.device!r} is not available here; available: {', '.join(available)}"))
        return None
    try:
        settle_run_file(cfg, path, trust=trust, out=out)
        # a text task on a model folder: the folder's model with the head the task needs (task.from_model)
        built = model_for_task(cfg, path.parent, trust=trust, out=out)
        model, arch = built or model_from_config(cfg.model, path.parent, trust=trust, origin=path)
        resume = cfg.model.checkpoint if cfg.model.resume and cfg.model.checkpoint else None
        # the same entry point as the window's training process (core.train.launch.training_process_main.run_job)
        trainer = make_trainer(model, cfg, list(callbacks), arch, resume=resume)
    except WorkbenchError as e:
        out(error_line(f"{e}"))
        return None
    except Exception as e:  # noqa: BLE001 - the CLI reports, never tracebacks at the user
        out(error_line(f"{error_text(e)}"))
        return None
    return trainer


def train_from_toml(path: str | Path, out: Callable[[str], Any] = print, *, trust: bool = False,
                    debug: bool = False, callbacks=()) -> int:
    """Run ``workbench train RUN.toml`` headless (no Qt).

    Reads the config, builds the model (``[model] arch`` + ``kwargs``, or
    ``checkpoint`` to start from, ``resume = true`` to continue its training
    state), trains, prints one progress line per epoch through ``out`` and writes
    the run folder (``run_dir`` from the file, else a new folder under the
    default runs root). Ctrl-C stops at the next step boundary.

    Parameters
    ----------
    path : str or Path
        The run file.
    out : callable
        Takes each line to print.
    trust : bool
        Run code the run file names (``--trust``; see :func:`model_from_config`).
    debug : bool
        Print tracebacks of unexpected errors (``--debug``).
    callbacks : sequence of Callback
        More callbacks of the run, after the printing and the edits' replay (``workbench train`` adds the
        attach server's, :class:`~workbench.core.attach.trainer_attach.TrainerAttach`, unless ``--no-attach``).

    Returns
    -------
    int
        0 completed, 130 stopped by Ctrl-C, 143 by SIGTERM, 129 by SIGHUP (each
        after saving ``last.pt`` at the step it stopped), 1 on any error (one
        ``error: ...`` line printed through ``out``).
    """
    replay = []
    edits_path = Path(path).parent / EDITS_FILE
    if edits_path.is_file():  # the mid-run edits of the run this run.toml came from
        try:
            replay = [ReplayEdits(read_edits(edits_path), out)]
        except (OSError, ValueError) as e:
            out(error_line(f"{e}"))
            return 1
        out(f"replaying {len(replay[0].edits)} mid-run edit(s) from {edits_path}")
    trainer = trainer_from_toml(path, out, [PrintProgress(out, debug), *replay, *callbacks],
                                trust=trust)
    if trainer is None:
        return 1
    ended_by: list[int] = []
    previous = _stop_on_signals(trainer, out, ended_by)
    try:
        reason = trainer.fit()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    if reason == "completed":
        return 0
    if reason == "stopped":
        with contextlib.suppress(Exception):
            saved = save_last(trainer)
            if saved is not None:
                out(f"saved {saved}")
        return 128 + ended_by[0] if ended_by and ended_by[0] != signal.SIGINT else 130
    return 1


#: Signals that stop a headless run at the next step boundary (last.pt saved); a second one acts as usual.
_STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


def _stop_on_signals(trainer, out: Callable[[str], Any], ended_by: list[int]) -> dict:
    """Make Ctrl-C, SIGTERM and SIGHUP stop ``trainer`` at its next step; the handlers they replaced.

    As the DDP launcher does for its ranks: a service manager's SIGTERM or a
    closed terminal's SIGHUP ends the run with ``last.pt`` at the step it
    stopped (exit 128 + the signal; 130 for Ctrl-C). SIGHUP is left alone when
    ignored (``nohup``). Only the main thread can set handlers; elsewhere none.
    """
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous: dict = {}

    def _on_signal(signum, frame):
        name = signal.Signals(signum).name
        again = "Ctrl-C" if signum == signal.SIGINT else name
        out(f"stopping at the next step ({name}; {again} again to abort)")
        ended_by.append(signum)
        trainer.request_stop()
        signal.signal(signum, previous.get(signum) or signal.SIG_DFL)

    for signum in _STOP_SIGNALS:
        current = signal.getsignal(signum)
        if signum != signal.SIGINT and current is signal.SIG_IGN:
            continue
        previous[signum] = signal.signal(signum, _on_signal)
    if previous.get(signal.SIGINT) in (None, signal.SIG_DFL):
        previous[signal.SIGINT] = signal.default_int_handler
    return previous


def lr_find_from_toml(path: str | Path, out: Callable[[str], Any] = print, min_lr: float = 1e-7,
                      max_lr: float = 10.0, steps: int = 100, *, trust: bool = False) -> int:
    """Run ``workbench lr-find RUN.toml``: the range test on the run's model, data, optimizer and frozen set.

    Prints the curve's summary and, on its last line, ``suggested_lr = <float>``;
    writes ``lr_find.csv`` (step, lr, loss, smoothed) into the run's folder: the
    folder that holds RUN.toml (:func:`lr_find_dir`). The model and optimizer are
    restored afterwards (nothing is saved but the CSV, and no run folder is made).

    Returns
    -------
    int
        0 with a suggestion, 1 on an error or when the sweep gave none.
    """
    from workbench.core.train.lr_finder import lr_find

    trainer = trainer_from_toml(path, out, trust=trust)
    if trainer is None:
        return 1
    folder = lr_find_dir(path)
    # the trainer's own run_dir is a new folder for a run folder's run.toml (its run_dir is None) and the file's
    # run_dir otherwise; the sweep makes neither: preparing the trainer only creates this existing folder
    trainer.config.run_dir = str(folder)
    try:
        result = lr_find(trainer, min_lr=min_lr, max_lr=max_lr, steps=steps)
    except (WorkbenchError, ValueError) as e:
        out(error_line(f"{e}"))
        return 1
    csv_path = result.write_csv(folder / "lr_find.csv")
    out(f"{len(result.lrs)} steps from {result.lrs[0]:.3g} to {result.lrs[-1]:.3g} ({result.reason}); "
        f"wrote {csv_path}" if result.lrs else f"no step was finite ({result.reason})")
    if result.steepest is not None:
        out(f"steepest descent at lr = {result.steepest:.3g}")
    if result.suggested is None:
        out("error: too few finite steps for a suggestion; widen the range or add steps")
        return 1
    out(f"suggested_lr = {result.suggested!r}")
    return 0


def lr_find_dir(path: str | Path) -> Path:
    """The run's folder that ``workbench lr-find RUN.toml`` writes ``lr_find.csv`` into: RUN.toml's own folder.

    A window run keeps its run.toml there beside metrics.csv, last.pt and
    edits.jsonl (its ``run_dir`` is empty, so training the file again would make
    a new folder); a hand-written run file's results go beside it too, whatever
    ``run_dir`` it names for training.
    """
    return Path(path).expanduser().resolve().parent
