"""The one answer policy: how the window and the command line answer :func:`~workbench.core.model.opening.open_model`'s questions.

:class:`OpenPolicy` opens a file and puts each question to an *asker* (an
object with the :class:`Asker` methods: the window's prompts, or the command
line's rules), then resumes from what the question carries -- the file is
read once whatever the answers (a file that cannot be read without trust is
read again after a yes):

* trust: :func:`~workbench.core.model.opening.open_trusted`;
* architecture: a bare state_dict whose detected best match is the only one
  matching every key and shape (:data:`~workbench.core.model.opened.UNIQUE_MATCH_SCORE`)
  opens in it with no question (:attr:`OpenPolicy.detected` names it); else the
  asker chooses a spec or :data:`WEIGHTS_ONLY`, and
  ``open_checkpoint(err.checkpoint, spec)`` resumes;
* partial fit: ``open_spec(err.checkpoint, err.spec, partial=True)`` when the
  asker agrees. With ``guess_fallback``, a guessed architecture that does not
  load shows the weights-only tree instead (the command line:
  :attr:`OpenPolicy.guess_failed` says why).

A declined question ends the open with None; :attr:`OpenPolicy.declined` keeps it. Qt-free.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from workbench.core.errors import ArchitectureError, TrustRequired
from workbench.core.model.detection import Candidate
from workbench.core.model.loading import LoadReport
from workbench.core.model.opened import DETECT_THRESHOLD, NeedsArchitecture, Opened, PartialFit
from workbench.core.model.opening import open_checkpoint, open_model, open_spec, open_trusted, open_weights_only
from workbench.core.model.spec import ArchSpec

__all__ = ["Asker", "OpenPolicy", "WEIGHTS_ONLY", "DETECT_THRESHOLD"]

#: The architecture answer "show the weights only".
WEIGHTS_ONLY = "weights_only"


class Asker(Protocol):
    """Who answers the open's questions (the window's prompts, the command line's rules)."""

    def trust(self, err: TrustRequired) -> bool:
        """True: run the code the file needs (``err.globals``, ``err.kind``)."""

    def architecture(self, candidates: list[Candidate], file_name: str) -> ArchSpec | str | None:
        """A spec (or ``"resnet18(num_classes=3)"``), :data:`WEIGHTS_ONLY`, or None to cancel."""

    def partial_load(self, report: LoadReport, file_name: str, spec: ArchSpec) -> bool:
        """True: load the tensors that fit ``spec`` and initialize the rest."""


class OpenPolicy:
    """Open a file, answering its questions through ``asker``, resuming from what each question carries.

    Parameters
    ----------
    asker : Asker
    take_unique_match : bool
        Open a bare state_dict in its unique full match without asking (default True).
    guess_fallback : bool
        When an architecture chosen by detection (not given by the user) does
        not load strictly, show the weights-only tree instead of asking (the command line).
    run : callable, optional
        ``run(fn) -> fn()``: how each step that reads or loads runs (the window:
        on a worker thread, so it keeps painting; the questions stay on the caller's
        thread). Default: called directly.

    Attributes
    ----------
    detected : Candidate or None
        The unique full match taken without a question in the last :meth:`open`.
    guess_failed : tuple of (ArchSpec, ArchitectureError) or None
        The guessed spec that did not load, when ``guess_fallback`` showed the weights instead.
    candidates : list of Candidate
        The ranking of the last architecture question (empty when none was asked).
    declined : Exception or None
        The question the asker declined (the last :meth:`open` returned None).
    """

    def __init__(self, asker: Asker, *, take_unique_match: bool = True, guess_fallback: bool = False,
                 run: Callable[[Callable[[], Opened]], Opened] | None = None):
        self.asker = asker
        self.run = run if run is not None else (lambda fn: fn())
        self.take_unique_match = take_unique_match
        self.guess_fallback = guess_fallback
        self.detected: Candidate | None = None
        self.guess_failed: tuple[ArchSpec, ArchitectureError] | None = None
        self.candidates: list[Candidate] = []
        self.declined: Exception | None = None

    def open(self, path: str | Path, arch: ArchSpec | str | Mapping | None = None, *, trust: bool = False,
             partial: bool = False, weights_only: bool = False, kwargs: Mapping[str, Any] | None = None) -> Opened | None:
        """:func:`~workbench.core.model.opening.open_model`, its questions answered.

        Parameters are those of ``open_model``.

        Returns
        -------
        Opened or None
            None when the asker declined a question (:attr:`declined`).

        Raises
        ------
        CheckpointError, ArchitectureError
            What ``open_model`` raises that is no question (and a PartialFit of
            a spec the user gave, when ``partial_load`` raises it).
        """
        self.detected, self.guess_failed, self.candidates, self.declined = None, None, [], None
        state = _State(arch, trust, partial, weights_only, dict(kwargs or {}))
        try:
            return self.run(lambda: open_model(path, arch, trust=trust, partial=partial, weights_only=weights_only,
                                               kwargs=kwargs))
        except (TrustRequired, NeedsArchitecture, PartialFit) as err:
            return self._answer(err, state)

    def _answer(self, err: Exception, state: "_State") -> Opened | None:
        while True:
            try:
                return self._answer_one(err, state)
            except (TrustRequired, NeedsArchitecture, PartialFit) as nxt:
                if state.guessed is not None and self.guess_fallback and not isinstance(nxt, TrustRequired):
                    return self._fallback(nxt, state)
                err = nxt
            except ArchitectureError as exc:
                if state.guessed is not None and self.guess_fallback:
                    return self._fallback(exc, state)
                raise

    def _answer_one(self, err: Exception, state: "_State") -> Opened | None:
        if isinstance(err, TrustRequired):
            if state.trust or not self.asker.trust(err):
                return self._decline(err)
            state.trust = True
            return self.run(lambda: open_trusted(err, state.arch, partial=state.partial,
                                                 weights_only=state.weights_only, kwargs=state.kwargs))
        if isinstance(err, NeedsArchitecture):
            return self._architecture(err, state)
        if state.partial or not self.asker.partial_load(err.report, Path(err.checkpoint.path).name, err.spec):
            return self._decline(err)
        state.partial = True
        return self.run(lambda: open_spec(err.checkpoint, err.spec, partial=True, edits=err.edits,
                                             module=err.module))

    def _architecture(self, err: NeedsArchitecture, state: "_State") -> Opened | None:
        self.candidates = list(err.candidates)
        match = err.unique_match if self.take_unique_match else None
        if match is not None:
            self.detected, choice = match, match.spec
        else:
            choice = self.asker.architecture(err.candidates, Path(err.checkpoint.path).name)
        if choice is None:
            return self._decline(err)
        if choice == WEIGHTS_ONLY:
            return open_weights_only(err.checkpoint)
        if match is not None or any(c.spec == choice for c in err.candidates):
            state.guessed, state.checkpoint = choice, err.checkpoint
        return self.run(lambda: open_checkpoint(err.checkpoint, choice, partial=state.partial, kwargs=state.kwargs))

    def _fallback(self, exc: ArchitectureError, state: "_State") -> Opened:
        self.guess_failed = (state.guessed, exc)
        return open_weights_only(state.checkpoint)

    @staticmethod
    def fair_guess(candidates: list[Candidate]) -> Candidate | None:
        """The best candidate when it scores at least :data:`DETECT_THRESHOLD` (the command line takes it), else None."""
        best = candidates[0] if candidates else None
        return best if best is not None and best.score >= DETECT_THRESHOLD else None

    def _decline(self, err: Exception) -> None:
        self.declined = err
        return None


class _State:
    """The answers so far of one :meth:`OpenPolicy.open`."""

    def __init__(self, arch: Any, trust: bool, partial: bool, weights_only: bool, kwargs: dict):
        self.arch, self.trust, self.partial, self.weights_only, self.kwargs = arch, trust, partial, weights_only, kwargs
        self.guessed: ArchSpec | None = None  # the spec detection chose, and the checkpoint it was for
        self.checkpoint = None
