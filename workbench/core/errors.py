"""The project's own exception types.

Every failure a user can cause ends in one of these, with a message that names
the file or step, says what is wrong and what to do next.
"""

from __future__ import annotations

from pathlib import Path


class WorkbenchError(Exception):
    """Base class of every error Workbench reports to a user."""


class CheckpointError(WorkbenchError):
    """A checkpoint file could not be read.

    Parameters
    ----------
    message : str
        What is wrong and what to do.
    path : str or Path, optional
        The file concerned; its name is put in front of the message.
    """

    def __init__(self, message: str, path: str | Path | None = None):
        self.path = Path(path) if path is not None else None
        text = f"{self.path}: {message}" if self.path is not None else message
        super().__init__(text)


class TrustRequired(CheckpointError):
    """Loading this file would run code from it; it needs an explicit trust decision.

    Parameters
    ----------
    path : str or Path
        The checkpoint.
    globals_ : list of str
        The globals the unpickler would import (``module.qualname``), as reported
        by ``torch.serialization.get_unsafe_globals_in_checkpoint``.
    kind : {"pickle", "torchscript", "code"}
        Why trust is needed: a pickle with custom globals, a TorchScript archive
        (which runs code by design), or a file that names code to import or call
        (an architecture, factory or other ``pkg.mod:callable`` / ``file.py:callable``
        spec that is not a registered contribution); ``globals_`` then holds that spec.
    roles : dict of str to str, optional
        For ``kind="code"``: what each spec of ``globals_`` is to the file (``"architecture"``,
        ``"dataset"``, ``"step"``, ``"loss"``, ``"metric"``), so the question says it (:attr:`roles`).
    """

    def __init__(self, path: str | Path, globals_: list[str], kind: str = "pickle",
                 roles: dict[str, str] | None = None):
        self.globals = list(globals_)
        self.kind = kind
        self.roles = dict(roles or {})
        if kind == "torchscript":
            what = "is a TorchScript archive; loading it runs code stored in the file"
        elif kind == "code":
            listed = ", ".join(self.globals) if self.globals else "(unknown)"
            what = f"names code that would be imported and called: {listed}"
        else:
            listed = ", ".join(self.globals) if self.globals else "(unknown)"
            what = f"needs these globals that weights-only loading refuses: {listed}"
        super().__init__(
            f"{what}. Load it only if you trust its source (--trust on the command line).",
            path,
        )


class CheckpointCorrupt(CheckpointError):
    """A checkpoint Workbench wrote no longer matches the digest stored in it.

    Parameters
    ----------
    path : str or Path
        The corrupt checkpoint.
    intact : str or Path, optional
        The newest checkpoint of the same run folder that verifies (``best.pt``,
        an earlier epoch's), or None when there is none.
    detail : str
        What did not match (e.g. ``"digest mismatch"``).
    """

    def __init__(self, path: str | Path, intact: str | Path | None = None, detail: str = "digest mismatch"):
        self.intact = Path(intact) if intact is not None else None
        self.detail = detail
        alt = (f"{self.intact.name} is intact: open or resume from it instead" if self.intact is not None
               else "no intact checkpoint of this run was found")
        super().__init__(f"is corrupt ({detail}); {alt}.", path)


class ArchitectureError(WorkbenchError):
    """A state_dict does not fit the chosen architecture, or no architecture is known.

    Parameters
    ----------
    message : str
        What is wrong and what to do.
    report : LoadReport, optional
        The load report (missing / unexpected / mismatched keys) when there is one.
    """

    def __init__(self, message: str, report=None):
        self.report = report
        super().__init__(message)


class ContributionError(WorkbenchError):
    """A named contribution (a training step, metric, probe...) is unknown or cannot be loaded.

    Architectures raise :class:`ArchitectureError` and datasets :class:`DataError`
    instead (:mod:`workbench.core.contrib`).
    """


class DataError(WorkbenchError):
    """A dataset is missing, unreadable or does not fit the model."""


class TrainingError(WorkbenchError):
    """A training step or run could not continue."""


class StepError(TrainingError, ValueError):
    """A training or validation step got a batch it cannot use, or returned no usable loss.

    The message says what the batch holds (shapes, dtypes) or what the step
    returned, and what to change (a built-in task, a ``[task] step``...).
    """
