"""What a run started from the window takes from the session: a model it can train, and where that model came from.

:func:`untrainable_reason` says why the model shown cannot be trained (Start and
Find LR show it); :func:`fill_model_source` records the model's source in the
run's config so that ``run.toml`` replays the run.
"""

from __future__ import annotations

from pathlib import Path

from workbench.core.model.skeleton import is_skeleton
from workbench.core.model.weights_only import WeightsOnlyModule

__all__ = ["untrainable_reason", "fill_model_source", "trained_source"]

#: The checkpoints of a run folder that hold the weights a run left in the window, best first: ``last.pt`` is
#: written at the run's end (its last epoch, or the step it stopped at), ``best.pt`` otherwise the newest.
TRAINED_FILES = ("last.pt", "best.pt")


def untrainable_reason(model) -> str | None:
    """Why ``model`` cannot be trained (None, a script's skeleton, a weights-only tree), or None when it can."""
    if model is None:
        return "There is no model to train: open a checkpoint or create a model first."
    if is_skeleton(model):
        return ("This tree is the structure of a script's model (attached): its weights and code are in the "
                "script. Attach to it again to steer it, or open a checkpoint it saved to train here.")
    if isinstance(model, WeightsOnlyModule):
        return ("This is a weights-only tree: it has no architecture, so no forward pass and no training. "
                "Choose the architecture with Edit > Change architecture… to train it.")
    return None


def fill_model_source(config, session, resume: bool, emit_every_ms: float, trained_in=None) -> None:
    """Record the model's source in ``config.model`` so ``run.toml`` replays the run.

    The architecture, the edits, and the opened checkpoint as the starting weights
    (with ``resume`` when ``resume`` is True: "Resume from opened checkpoint" is
    ticked and no run has changed the weights since the file was opened);
    ``keep_frozen_bn_eval`` from the session and ``emit_every_ms`` at least ``emit_every_ms`` (ms).

    ``trained_in``: the folder of the run whose trained weights the model holds
    now (a run since the file was opened); ``source`` then names that run's
    checkpoint of them (:func:`trained_source`), not the file opened before it.
    None when the model holds the file's weights: never trained here, or put back
    at Start ("the file as opened", :mod:`workbench.ui.train.start_from`).
    """
    spec = session.arch_spec
    if spec is not None:
        config.model.arch = spec.name
        config.model.kwargs = dict(spec.kwargs)
    config.model.edits = [dict(e) for e in session.edits]
    path = getattr(session.checkpoint, "path", None)
    trained = trained_source(trained_in)
    if trained is not None:
        config.model.source = trained
    elif path is not None and Path(path).is_file():
        config.model.source = str(Path(path).resolve())
        if resume:
            config.model.checkpoint = config.model.source
            config.model.resume = True
    config.keep_frozen_bn_eval = bool(session.keep_bn_stats_fixed)
    config.emit_every_ms = max(float(config.emit_every_ms), float(emit_every_ms))


def trained_source(run_dir) -> str | None:
    """The checkpoint of the run folder ``run_dir`` that holds the weights the run left in the window, or None.

    ``last.pt`` (written when the run ended or stopped), else ``best.pt``; None
    without a run folder or either file.
    """
    if not run_dir:
        return None
    for name in TRAINED_FILES:
        path = Path(run_dir) / name
        if path.is_file():
            return str(path.resolve())
    return None
