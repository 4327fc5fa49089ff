"""The head a text task needs, added to the window's model at Start (a sentence model folder has none).

The window trains the model it shows: a bare ``BertModel`` opened from a
sentence-model folder gets its ``BertForSequenceClassification`` head sized to the
data's classes, a classifier with a head of another size a new one, when Start is
pressed with a text task. Core does the work
(:func:`workbench.core.train.task.from_model.add_task_head`, the data's classes from
:func:`workbench.core.train.data.text.text_classes`); this module shows the new
model in the session, with the edits made before replayed on it.
"""

from __future__ import annotations

__all__ = ["ensure_task_head"]


def ensure_task_head(session, config) -> str | None:
    """Give ``session.model`` the head ``config``'s text task needs; the status line, or None when it had it.

    Parameters
    ----------
    session : Session
        ``model``, ``arch_spec``, ``checkpoint``, ``source``, ``edits``, ``set_model``.
    config : TrainConfig
        The run about to start (``task.kind``, ``data``).

    Raises
    ------
    WorkbenchError
        The data's classes cannot be read, or transformers has no class with the head.
    """
    from workbench.core.train.config import TEXT_KINDS

    if config.task.kind not in TEXT_KINDS or config.data.dataset != "text":
        return None
    from workbench.core.train.task.from_model import add_task_head

    classes = None
    if config.task.kind == "text_classification":
        from workbench.core.train.data.text import text_classes

        classes = text_classes(config.data)
    added = add_task_head(session.model, session.arch_spec, config.task.kind, classes, list(session.edits))
    if added is None:
        return None
    model, spec, edits, note = added
    session.set_model(model, spec=spec, checkpoint=session.checkpoint, source=session.source)
    session.edits = [dict(e) for e in edits]
    return note
