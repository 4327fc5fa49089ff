"""The one trust rule for code that a file names: what may be resolved without asking.

A checkpoint, a safetensors header, a run.toml or any other file can name code:
an architecture or factory (``pkg.mod:callable``, ``path/file.py:callable``)
with keyword arguments. Reading such a name is harmless; importing or calling
it runs whatever it names (``os:system`` included), which is the class of bug
CVE-2025-32434 was for ``torch.load``. So, as for a pickle, the file does not
decide what runs:

* a name that is a **registered contribution** resolves without asking. Today
  these are Workbench's builtins (:data:`BUILTINS`) and torchvision's model
  builders (``torchvision.models.list_models()``); later sources (timm,
  transformers' Auto classes without remote code, installed entry points)
  register here too;
* anything else read from a file raises
  :class:`~workbench.core.errors.TrustRequired` (``kind="code"``) naming the
  callable and the file, before anything is imported; the caller asks the user
  (the window: a dialog whose default is Cancel; the command line: ``--trust``);
* keyword arguments read from a file are plain data only (None, bool, int,
  float, str, and lists and str-keyed dicts of those), and never ask a
  registered builder to download weights;
* a ``file.py:callable`` named by a file resolves relative to that file's
  folder, never the current folder.

A spec typed by the user (the window's architecture field, ``--arch``) is the
user's own decision and does not pass through here. This module is the only
place that applies the rule (``DESIGN.md``, "Safety contract"). Qt-free.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from workbench.core.errors import ArchitectureError, TrustRequired

__all__ = ["BUILTINS", "is_registered_architecture", "check_file_spec", "plain_kwargs", "no_downloads"]

#: Workbench's own architectures, by name: registered contributions.
BUILTINS: dict[str, str] = {"digits_cnn": "workbench.core.model.demo:DigitsCNN"}

#: Keyword arguments of registered builders that would download weights when set.
_DOWNLOAD_KWARGS = ("weights", "weights_backbone", "pretrained", "pretrained_backbone")
#: Nesting depth of plain data accepted from a file (a dict of lists of dicts ...).
_MAX_DEPTH = 8


def is_registered_architecture(name: str) -> bool:
    """True when ``name`` is a registered architecture (a builtin or a torchvision model name).

    Parameters
    ----------
    name : str
        An architecture name without arguments (``"resnet18"``, ``"pkg.mod:fn"``).

    Returns
    -------
    bool
        False for every factory spec (``":"`` in the name): those are code.
    """
    if name in BUILTINS:
        return True
    if ":" in name or "/" in name or "\\" in name:
        return False
    import torchvision

    return name in torchvision.models.list_models()


def _is_plain(value: Any, depth: int = 0) -> bool:
    if depth > _MAX_DEPTH:
        return False
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v, depth + 1) for k, v in value.items())
    return False


def plain_kwargs(kwargs: Any, origin: str | Path) -> dict:
    """Keyword arguments read from a file, checked to be plain data.

    Parameters
    ----------
    kwargs : mapping or None
        As read from the file.
    origin : str or Path
        The file they come from (named in the error).

    Returns
    -------
    dict
        A shallow copy.

    Raises
    ------
    ArchitectureError
        Not a mapping of str keys, or a value that is not plain data (a
        callable, a tensor, an object).
    """
    if kwargs is None:
        return {}
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise ArchitectureError(f"{origin}: the architecture's kwargs must be a table of names to values, "
                                f"not {type(kwargs).__name__}")
    for key, value in kwargs.items():
        if not _is_plain(value):
            raise ArchitectureError(
                f"{origin}: architecture kwarg {key!r} is a {type(value).__name__}; a file may give only plain "
                "values (numbers, strings, lists and tables of those)")
    return dict(kwargs)


def no_downloads(kwargs: Mapping[str, Any], origin: str | Path) -> None:
    """Refuse keyword arguments from a file that would make a registered builder download weights.

    Applies to registered architectures only (torchvision's ``weights``,
    ``weights_backbone``, ``pretrained``...): a trusted factory of the user's
    own gives these names whatever meaning it likes.

    Raises
    ------
    ArchitectureError
        One of those arguments is set to anything but None / False.
    """
    for key in _DOWNLOAD_KWARGS:
        value = kwargs.get(key)
        if value not in (None, False):
            raise ArchitectureError(
                f"{origin}: architecture kwarg {key}={value!r} would download weights; Workbench builds "
                "architectures with weights=None and loads the file's own tensors. Remove it from the file.")


def check_file_spec(name: str, origin: str | Path, *, trust: bool) -> str | None:
    """Apply the trust rule to an architecture name read from ``origin``.

    Parameters
    ----------
    name : str
        The name as the file gives it (``"resnet18"``, ``"pkg.mod:fn"``, ``"helper.py:make"``).
    origin : str or Path
        The file that names it.
    trust : bool
        The user agreed to run code named by this file.

    Returns
    -------
    str or None
        The folder that relative ``file.py:`` paths resolve against (``origin``'s
        folder) for a trusted factory spec; None for a registered name.

    Raises
    ------
    ArchitectureError
        ``name`` is not a string or is empty.
    TrustRequired
        ``name`` is not a registered contribution and ``trust`` is False. Nothing
        was imported.
    """
    if not isinstance(name, str) or not name.strip():
        raise ArchitectureError(f"{origin}: the architecture name must be a non-empty string, not {name!r}")
    if is_registered_architecture(name) or ":" not in name:  # registered, or unknown (an error when built)
        return None
    if not trust:
        raise TrustRequired(origin, [name], kind="code")
    return str(Path(origin).expanduser().resolve().parent)
