"""Import transformers' modeling code ahead, on a daemon thread, while the window waits for the user.

Opening a Hugging Face model folder in a fresh process spends most of its time
in ``transformers`` importing its own modeling code, not in Workbench: on the
2-core benchmark machine ~2.0-2.1 s of a 2.3-2.4 s open of a 1.1B-parameter Llama
folder (``modeling_utils``, ``masking_utils`` and ``activations`` pull in
``torch._dynamo``, ``torch.distributed.tensor`` and, for the detection losses,
``scipy.optimize``). Those modules are the same for nearly every model class,
so the window imports them half a second after its event loop starts
(:func:`start`), and the open of a folder later takes the rest (~0.3 s). Nothing of a model folder is
read here and no code a file names runs: only the installed library's own
modules, the same ones the open would import.

Why a module of Workbench's own: Python has no "import ahead" facility; this is
the least that does it safely. Code about to import transformers calls
:func:`claim` first: while the imports ahead run it waits for them, and before
they started it makes sure they never will, so the same modules are never
imported on two threads at once (which Python allows, but may then hand a
partially initialised module to one of the two).

Callers of :func:`claim`: opening a model folder and rebuilding its model
(:mod:`workbench.core.model.hf_build`), importing a spec's module
(:func:`workbench.core.contrib.load_callable`: a factory may import
transformers) and LoRA (peft imports transformers).

Qt-free, and below every other module of ``workbench.core`` (it imports none):
``transformers`` is imported only on the thread, and only when it is installed.
"""

from __future__ import annotations

import importlib
import logging
import threading
from importlib.metadata import PackageNotFoundError, version

__all__ = ["TRANSFORMERS_MODULES", "start", "claim"]

log = logging.getLogger(__name__)

#: The modules of transformers that the modeling file of nearly every model imports
#: (BERT's, GPT-2's, Llama's, ViT's: checked against transformers 5.x); a name a
#: release does not have is skipped.
TRANSFORMERS_MODULES = (
    "transformers.modeling_utils",
    "transformers.masking_utils",
    "transformers.modeling_layers",
    "transformers.activations",
    "transformers.cache_utils",
    "transformers.generation",
    "transformers.modeling_outputs",
    "transformers.modeling_rope_utils",
    "transformers.processing_utils",
    "transformers.models.auto.modeling_auto",
)

_LOCK = threading.Lock()
_THREAD: threading.Thread | None = None
#: Set by :func:`claim` before any imports ahead started: they never will in this process.
_CLAIMED = False


def start() -> threading.Thread | None:
    """Import :data:`TRANSFORMERS_MODULES` on a daemon thread, once per process.

    Returns
    -------
    threading.Thread or None
        The thread (the running or finished one on a second call); None when
        transformers is not installed (nothing to import) or something already
        imports it (:func:`claim`).
    """
    global _THREAD
    with _LOCK:
        if _THREAD is not None:
            return _THREAD
        if _CLAIMED or not _installed("transformers"):
            return None
        _THREAD = threading.Thread(target=_import_all, name="workbench-warm-imports", daemon=True)
        _THREAD.start()
        return _THREAD


def _installed(dist: str) -> bool:
    """Whether distribution ``dist`` is installed (its metadata; nothing is imported)."""
    try:
        version(dist)
    except PackageNotFoundError:
        return False
    return True


def _import_all() -> None:
    for name in TRANSFORMERS_MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - best effort: the open imports what it needs and reports
            log.debug("workbench: %s not imported ahead: %s: %s", name, type(exc).__name__, exc)


def claim(timeout: float | None = None) -> None:
    """The caller is about to import transformers: wait for the imports ahead, or make sure they never start.

    Never raises; at once when the imports ahead are done or never started.

    Parameters
    ----------
    timeout : float, optional
        Seconds to wait at most for imports ahead that are running; None waits until they are done.
    """
    global _CLAIMED
    with _LOCK:
        thread = _THREAD
        if thread is None:
            _CLAIMED = True  # start() from now on does nothing: this caller imports them itself
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout)
