"""What opening a file gives, and the questions it asks: :class:`Opened`, :class:`NeedsArchitecture`,
:class:`PartialFit` (used by :mod:`workbench.core.model.opening` and :mod:`workbench.core.model.hf_build`).

A question carries what was read (``checkpoint``), so its answer resumes from
there (:func:`workbench.core.model.opening.open_spec`) without reading the file
again. Qt-free."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from torch import nn

from workbench.core.errors import ArchitectureError
from workbench.core.model.detection import Candidate
from workbench.core.model.loading import LoadReport
from workbench.core.model.spec import ArchSpec
from workbench.core.model.checkpoint import Checkpoint
from workbench.core.model.example_input import ExampleInput

__all__ = ["Opened", "NeedsArchitecture", "PartialFit", "UNIQUE_MATCH_SCORE", "DETECT_THRESHOLD"]

#: A candidate scoring this (every key and shape matches) that no other candidate ties is taken without a question.
UNIQUE_MATCH_SCORE = 1.0
#: The best candidate is a fair guess from this score (the command line takes it, the window asks).
DETECT_THRESHOLD = 0.9


class NeedsArchitecture(ArchitectureError):
    """The file names no architecture; choose one of ``candidates`` (best first) or weights only.

    Attributes
    ----------
    checkpoint : Checkpoint
    candidates : list of Candidate
    """

    def __init__(self, checkpoint: Checkpoint, candidates: list[Candidate]):
        self.checkpoint = checkpoint
        self.candidates = list(candidates)
        super().__init__(f"{checkpoint.path}: the file does not say which architecture it is for; "
                         "choose one (e.g. --arch resnet18) or open the weights only")

    @property
    def unique_match(self) -> Candidate | None:
        """The one candidate that matches every key and shape (:data:`UNIQUE_MATCH_SCORE`), or None (none, or a tie)."""
        perfect = [c for c in self.candidates if c.score >= UNIQUE_MATCH_SCORE]
        return perfect[0] if len(perfect) == 1 else None


class PartialFit(ArchitectureError):
    """The architecture does not take every tensor of the file strictly.

    Attributes
    ----------
    checkpoint : Checkpoint
    spec : ArchSpec
    report : LoadReport
        Missing, unexpected and mismatched tensors.
    edits : list of dict
        The structural edits made before loading (answer with
        ``open_spec(err.checkpoint, err.spec, partial=True, edits=err.edits, module=err.module)``).
    module : nn.Module or None
        The architecture as the strict attempt built it (edits made, nothing
        loaded): the partial answer loads into it instead of building again.
    """

    def __init__(self, checkpoint: Checkpoint, spec: ArchSpec, report: LoadReport, message: str,
                 edits: list[dict] = (), module: nn.Module | None = None):
        self.checkpoint, self.spec, self.edits, self.module = checkpoint, spec, list(edits), module
        super().__init__(message, report)


@dataclass
class Opened:
    """What :func:`open_model` returns.

    Attributes
    ----------
    model : nn.Module
        On CPU; ``requires_grad`` False for the file's ``frozen`` entry.
    spec : ArchSpec or None
        None for a weights-only tree and for a pickled module / TorchScript
        without an ``arch`` entry.
    checkpoint : Checkpoint
    report : LoadReport or None
        How the tensors went in (None for a module stored whole).
    weights_only : bool
        The model is the weights-only module tree (no forward pass).
    notes : list of str
        What the caller should tell the user (e.g. a partial load).
    example : ExampleInput or None
        What the file says the model is called with (a model folder's config:
        token ids and a mask, ``pixel_values``, timm's ``input_size``); None
        when the file says nothing.
    input_shape : tuple of int or None
        The example input shape the architecture implies when the file gives
        no ``example`` (:func:`~workbench.core.model.example_input.spec_input_shape`:
        the demo's, a Tabular MLP's row, timm's ``input_size``, 224 x 224 for
        torchvision classifiers), else the model's own hint
        (:func:`~workbench.core.model.example_input.default_input_shape`); None when unknown.
    """

    model: nn.Module
    spec: ArchSpec | None
    checkpoint: Checkpoint
    report: LoadReport | None = None
    weights_only: bool = False
    notes: list[str] = field(default_factory=list)
    example: ExampleInput | None = None
    input_shape: tuple[int, ...] | None = None

    @property
    def source(self) -> str:
        """``"<file name> · <format>"``, what the status bar and title show."""
        return f"{Path(self.checkpoint.path).name} · {self.checkpoint.metadata.format}"
