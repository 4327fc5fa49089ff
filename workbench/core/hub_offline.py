"""Workbench never reaches the network: the Hugging Face Hub offline, in its processes and in every build.

Two layers (``DESIGN.md``, "Safety contract": nothing in a file makes Workbench touch the network):

* :func:`offline_by_default` sets :data:`OFFLINE_VARIABLES` in the environment
  of Workbench's own processes (the ``workbench`` command, the window, the
  training process it starts), before anything imports ``huggingface_hub``
  (which reads them once, when it is imported), unless the user set one of them.
  ``import workbench`` and ``workbench.attach`` never call it: a user's own
  script keeps its environment.
* :func:`hub_offline` turns ``huggingface_hub``'s offline mode on for the block
  whatever the environment says: the model builders
  (:mod:`workbench.core.model.hf_build`) build inside it, so that a config a
  file holds cannot make transformers or timm send a request from a Python
  call of the core API either (every Hub request raises
  ``OfflineModeIsEnabled``; :func:`offline_refusal` finds it in an error).

Imports nothing at module level (the command imports this before torch).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, MutableMapping

__all__ = ["OFFLINE_VARIABLES", "offline_by_default", "hub_offline", "offline_refusal"]

#: The variables that put huggingface_hub (and transformers, which asks it) offline.
OFFLINE_VARIABLES = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

_lock = threading.Lock()
_depth = 0
_before: bool | None = None


def offline_by_default(environ: MutableMapping[str, str] | None = None) -> None:
    """Set :data:`OFFLINE_VARIABLES` in ``environ`` (default ``os.environ``) unless the user set either one.

    Call it first in a Workbench entry point, before ``huggingface_hub`` is
    imported; child processes inherit it. A user who set ``HF_HUB_OFFLINE`` or
    ``TRANSFORMERS_OFFLINE`` (to anything) keeps their value.
    """
    env = os.environ if environ is None else environ
    if any(name in env for name in OFFLINE_VARIABLES):
        return
    for name, value in OFFLINE_VARIABLES.items():
        env.setdefault(name, value)


@contextlib.contextmanager
def hub_offline() -> Iterator[None]:
    """``huggingface_hub`` offline for the block (every Hub request raises), its own setting restored after.

    Imports ``huggingface_hub`` when it is installed (call it where importing is
    allowed: after :func:`workbench.core.warm_imports.claim`); without it,
    nothing of transformers or timm can reach the Hub and the block runs as is.
    Re-entrant and thread-safe: the setting is restored when the last block ends.
    """
    global _depth, _before
    try:
        from huggingface_hub import constants
    except ImportError:
        yield
        return
    with _lock:
        if _depth == 0:
            _before = constants.HF_HUB_OFFLINE
        _depth += 1
        constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                constants.HF_HUB_OFFLINE = bool(_before)


def offline_refusal(exc: BaseException) -> str | None:
    """The URL a build tried to reach when ``exc`` (or an error it came from) is the Hub's offline refusal.

    Returns
    -------
    str or None
        ``"http://.../api/models/org/repo"`` (or the error's text when it names
        no URL); None when no ``OfflineModeIsEnabled`` is in the chain.
    """
    seen: set[int] = set()
    err: BaseException | None = exc
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if type(err).__name__ == "OfflineModeIsEnabled":
            text = str(err)
            start = text.find("http")
            return text[start:].split()[0].rstrip(":") if start >= 0 else text[:200]
        err = err.__cause__ or err.__context__
    return None
