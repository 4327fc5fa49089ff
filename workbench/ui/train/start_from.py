"""Start with a model trained in this window: from its trained weights, or from the file as opened again.

After a run the window's model keeps the weights the run left. Pressing Start
again asks (``prompts.start_from``) which weights the new run starts from; "the
file as opened" puts the file's weights back
(:func:`workbench.core.model.reload.reload_weights`, on a worker thread) and
keeps the structure edits, the frozen set and the probes. The run's
``[model] source`` then names that file instead of the previous run's
``last.pt`` (:func:`~workbench.ui.train.run_config.fill_model_source`).
"""

from __future__ import annotations

from pathlib import Path

from workbench.core.model.reload import reload_weights
from workbench.ui.threading import run_in_background

__all__ = ["choose_start_weights"]


def choose_start_weights(session, prompts, run_dir, status, parent=None) -> str | None:
    """Ask which weights a run starts from when the model was trained in this window, and act on the answer.

    Parameters
    ----------
    session : Session
        ``model``, ``checkpoint`` (the file opened) and ``edits``; ``weightsChanged`` is emitted when restored.
    prompts : Prompts
        ``start_from(run_name, path)``; an object without it means "trained" (as before the question).
    run_dir : str or None
        The folder of the run that trained the weights (its name is shown).
    status : callable
        ``status(text, ms)``: what was restored, or why not.
    parent : QWidget, optional
        Owner of the busy dialog while the file is read.

    Returns
    -------
    str or None
        ``"trained"`` (nothing changed; also when no opened file is left to go back to),
        ``"file"`` (the model holds the file's weights again) or None (Cancel, or the file
        could not be read: Start does nothing).
    """
    path = getattr(session.checkpoint, "path", None)
    ask = getattr(prompts, "start_from", None)
    if path is None or not Path(path).exists() or ask is None:
        return "trained"
    answer = ask(Path(run_dir).name if run_dir else "the last run", str(path))
    if answer != "file":
        return answer if answer == "trained" else None
    model, edits = session.model, list(session.edits)
    try:
        kept = run_in_background(lambda: reload_weights(model, path, edits),
                                 f"Reading the weights of {Path(path).name}…", parent)
    except Exception as exc:  # noqa: BLE001 - the file changed or went: say so, start nothing
        status(f"Start: could not restore the weights of {Path(path).name}: {exc}", 15000)
        return None
    note = f" ({len(kept)} tensors kept as they were: {', '.join(kept[:3])}{' …' if len(kept) > 3 else ''})" \
        if kept else ""
    status(f"Restored the weights of {Path(path).name}{note}; edits, frozen layers and probes kept", 10000)
    session.weightsChanged.emit()
    return "file"
