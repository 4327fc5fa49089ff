"""What a run writes of itself when it starts: ``run.toml``, ``init.pt``, ``status.json``, ``metrics.csv``,
``steps.csv``. Qt-free.

:func:`record_start` writes into ``config.model`` (and so ``run.toml``) what the
run starts from; :func:`open_run_files` writes the run folder's files (rank 0).
``workbench train run.toml`` replays a run from them.
"""

from __future__ import annotations

import time

from workbench.core.model.demo import DigitsCNN
from workbench.core.model.names import frozen_names
from workbench.core.model.saving import checkpoint_payload
from workbench.core.train.config import TrainConfig
from workbench.core.train.runs.folder import MetricsCSV, StepsCSV, write_status
from workbench.core.train.runs.writes import ReportedMetricsCSV, ReportedStepsCSV
from workbench.core.train.trainer.types import TrainerLike

__all__ = ["record_model", "record_start", "open_run_files", "status_info"]


def status_info(config: TrainConfig) -> dict:
    """The fields of ``status.json`` beside its state: model (its short name: ``LlamaForCausalLM``, not the builder
    that reads its config), dataset, epochs."""
    from workbench.core.model.spec import short_name

    mc = config.model
    model = short_name({"name": mc.arch, "kwargs": mc.kwargs}, mc.source or mc.checkpoint or None) or mc.arch
    return {"model": model, "dataset": config.data.dataset, "epochs": int(config.epochs)}


def record_model(mc, model, arch=None) -> dict | None:
    """Write into ``mc`` (``[model]``) what builds ``model`` again: ``arch`` / ``kwargs`` (the spec given, the
    demo's, or none without a file) and ``frozen``; the ``{"name", "kwargs"}`` an ``init.pt`` records, or None.
    The one record of a run's model, for a run here and a run sent to a host alike."""
    if arch is not None:
        d = arch.to_dict() if hasattr(arch, "to_dict") else {
            "name": getattr(arch, "name", str(arch)), "kwargs": getattr(arch, "kwargs", {})}
        mc.arch, mc.kwargs = d["name"], dict(d.get("kwargs") or {})
    elif type(model) is DigitsCNN:
        mc.arch = "digits_cnn"
        mc.kwargs = {"num_classes": model.classifier.out_features, "in_channels": model.features[0].in_channels}
    elif not mc.checkpoint:
        mc.arch = ""
    mc.frozen = frozen_names(model)
    return {"name": mc.arch, "kwargs": dict(mc.kwargs)} if mc.arch else None


def record_start(trainer: TrainerLike) -> None:
    """Write into ``config.model`` (and so run.toml) what this run starts from.

    A fresh run (not resumed, step 0) also writes ``run_dir/init.pt``: the
    exact starting weights, frozen set and architecture, which
    ``workbench train run.toml`` replays from (``[model] init``), whatever
    form the opened file had and whatever was edited in the window.
    """
    mc = trainer.config.model
    arch = record_model(mc, trainer.model, trainer.arch)
    if trainer.resumed or trainer.step > 0:
        return
    # FSDP: gathered from every rank's shards (on rank 0); else the model itself
    payload = checkpoint_payload(trainer.strategy.full_weights(), arch=arch, include_rng=False)
    if trainer.is_main:
        trainer.checkpoints.save_in_background(payload, [trainer.run_dir / "init.pt"])
    mc.init = "init.pt"
    if not mc.resume:
        mc.source = mc.source or mc.checkpoint
        mc.checkpoint = ""


def open_run_files(trainer: TrainerLike) -> tuple[float, MetricsCSV, StepsCSV]:
    """Rank 0 at ``fit()``'s start: ``run.toml`` (replayable), ``status.json`` (running), ``metrics.csv`` and
    ``steps.csv`` (the step rows, appended by ``Trainer.emit`` from the first step on).

    A damaged ``metrics.csv`` set aside is said through ``on_progress``; a resumed
    run's new folder starts with the epochs it continues. Their later writes never raise: a failure is said
    through ``on_notice`` (``trainer.checkpoints.writes``, :mod:`~workbench.core.train.runs.writes`).

    Returns
    -------
    (float, MetricsCSV, StepsCSV)
        ``time.time()`` of the start (``status.json``'s ``started``), the open ``metrics.csv`` and ``steps.csv``
        (a resumed run's steps redone replace their rows there).

    Raises
    ------
    OSError
        A file cannot be written.
    """
    saved = TrainConfig.from_dict({**trainer.config.to_dict()})
    saved.run_dir = None  # replaying run.toml makes a new run folder
    saved.to_toml(trainer.run_dir / "run.toml")
    started = time.time()
    write_status(trainer.run_dir, None, started, status_info(trainer.config))
    writes = trainer.checkpoints.writes
    csv = ReportedMetricsCSV(trainer.run_dir / "metrics.csv", writes)
    if csv.problem:  # a damaged metrics.csv was set aside: say so where the run is watched
        trainer.call("on_progress", trainer, f"metrics.csv: {csv.problem}")
    if trainer.history and not csv.rows:  # a resumed run's folder starts with the epochs it continues
        for h in trainer.history:
            csv.append({**h, "time_s": h.get("time"), "best": int(bool(h.get("best")))})
    return started, csv, ReportedStepsCSV(trainer.run_dir / "steps.csv", writes)
