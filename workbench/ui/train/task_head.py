"""What Start settles about the model before a run: the head a text task needs (a sentence model folder has
none), and how far a finished run that is resumed goes on.

The window trains the model it shows: a bare ``BertModel`` opened from a
sentence-model folder gets its ``BertForSequenceClassification`` head sized to the
data's classes, a classifier with a head of another size a new one, when Start is
pressed with a text task. Core does the work
(:func:`workbench.core.train.task.from_model.add_task_head`, the data's classes from
:func:`workbench.core.train.data.text.text_classes`); this module shows the new
model in the session, with the edits made before replayed on it.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["ensure_task_head", "extend_finished_run"]


def ensure_task_head(session, config, error, status) -> bool:
    """Give ``session.model`` the head ``config``'s text task needs, and ``config.model`` the new model's source.

    Parameters
    ----------
    session : Session
        ``model``, ``arch_spec``, ``checkpoint``, ``source``, ``edits``, ``set_model``.
    config : TrainConfig
        The run about to start (``task.kind``, ``data``); its ``[model]`` follows a new model.
    error : callable
        Shows one line why the run cannot start (the data's classes cannot be read, transformers has no
        class with the head).
    status : callable
        ``status(text, ms)``: says which head was added.

    Returns
    -------
    bool
        False when the run cannot start (``error`` was called); True otherwise (a head added or none needed).
    """
    try:
        note = _add_head(session, config)
    except Exception as exc:  # noqa: BLE001 - the data or the model says why, in one line
        error(f"Cannot start training: {exc}")
        return False
    if note:
        config.model.arch, config.model.kwargs = session.arch_spec.name, dict(session.arch_spec.kwargs)
        config.model.edits = [dict(e) for e in session.edits]
        status(note, 10000)
    return True


def _add_head(session, config) -> str | None:
    from workbench.core.train.config import TEXT_KINDS

    image = config.task.kind == "image_classification" and config.data.dataset == "imagefolder"
    if not image and (config.task.kind not in TEXT_KINDS or config.data.dataset != "text"):
        return None
    from workbench.core.train.task.from_model import add_task_head

    classes = None
    if image:  # the ImageFolder's class subfolders, through the opened folder's image processor by default
        from workbench.core.train.data.image_processor import image_classes, load_image_processor

        path = getattr(session.checkpoint, "path", None)
        if not config.data.processor and path and (Path(path) / "preprocessor_config.json").is_file():
            config.data.processor = str(Path(path).resolve())
        if config.data.processor:
            load_image_processor(config.data.processor)  # a folder without one: one line, before the run
        classes = image_classes(config.data)
    elif config.task.kind != "causal_lm":  # a classifier's head is sized to the data's classes (or tags)
        from workbench.core.train.data.text import task_classes

        classes = task_classes(config.data, config.task.kind)
    from workbench.core.train.data.text import is_multi_label

    added = add_task_head(session.model, session.arch_spec, config.task.kind, classes, list(session.edits),
                          multi_label=not image and is_multi_label(config.data))
    if added is None:
        return None
    model, spec, edits, note = added
    session.set_model(model, spec=spec, checkpoint=session.checkpoint, source=session.source)
    session.edits = [dict(e) for e in edits]
    return note


def extend_finished_run(checkpoint, config, prompts, status, epochs_spin) -> bool:
    """Resuming a run that already did its planned epochs: ask until which epoch to go on; False = cancel.

    ``checkpoint.raw["epoch"]`` is the epochs done; the answer (``prompts.integer``) sets ``config.epochs``
    and ``epochs_spin``; a cancel or an epoch not past those done says so through ``status(text, ms)``.
    """
    raw = getattr(checkpoint, "raw", None) or {}
    done = int(raw.get("epoch") or 0)
    if done < config.epochs:
        return True
    until = prompts.integer(
        "Extend the run", f"The checkpoint has completed {done} of {config.epochs} planned epochs.\n"
        "Train until epoch:", done + 1)
    if until is None or until <= done:
        status("Nothing to resume: the run has completed its epochs.", 8000)
        return False
    config.epochs = int(until)
    epochs_spin.setValue(int(until))
    return True
