"""An architecture by name: :class:`ArchSpec`, a name and its constructor arguments.

Names resolve through the contributions registry (:mod:`workbench.core.contrib`):
Workbench's builtins, torchvision's builders, installed packages' entry points
(``workbench.architectures``), and ``pkg.mod:callable`` / ``file.py:callable`` specs.
A spec is data; building it is :mod:`workbench.core.model.meta_build`'s job.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from workbench.core import contrib
from workbench.core.errors import ArchitectureError

_PLAIN_TYPES = (str, int, float, bool, type(None))
#: ``pkg.mod.callable``: Python's call syntax for a factory (``timm.create_model(...)``).
_DOTTED_CALL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")



@dataclass
class ArchSpec:
    """Names an architecture and its constructor keyword arguments.

    Attributes
    ----------
    name : str
        A torchvision model name (``"resnet18"``), a builtin (``"digits_cnn"``), an
        installed package's registered name (``workbench contributions``), or a
        factory spec ``"package.module:callable"`` / ``"path/to/file.py:callable"``.
    kwargs : dict
        Constructor keyword arguments, e.g. ``{"num_classes": 10}``. torchvision
        models are always built with ``weights=None`` (nothing is downloaded).
    base : str or None
        The folder a relative ``file.py:`` factory path resolves against: the
        folder of the file that named the spec (:meth:`from_file`); None: the
        current folder (a spec the user typed). Not saved by :meth:`to_dict`,
        which writes such paths absolute instead.
    args : tuple
        Positional arguments of a factory, plain values only:
        ``timm:create_model('resnet50d', num_classes=10)`` has
        ``args=("resnet50d",)``. Built as ``factory(*args, **kwargs)``.
    """

    name: str
    kwargs: dict = field(default_factory=dict)
    base: str | None = field(default=None, compare=False, repr=False)
    args: tuple = ()

    def with_kwargs(self, **extra: Any) -> ArchSpec:
        """A copy with ``extra`` added to :attr:`kwargs` (``args`` and ``base`` kept)."""
        return replace(self, kwargs={**self.kwargs, **extra})

    @property
    def factory_file(self) -> Path | None:
        """The absolute path of a ``file.py:callable`` spec's file (None for other specs)."""
        target, sep, _ = self.name.rpartition(":")
        if not sep or not (target.endswith(".py") or "/" in target or "\\" in target):
            return None
        path = Path(target).expanduser()
        if not path.is_absolute():
            path = Path(self.base or Path.cwd()) / path
        return path.resolve()

    def to_dict(self) -> dict:
        """``{"name": ..., "kwargs": {...}}`` (and ``"args": [...]`` when there are any) of plain values.

        Values are str/int/float/bool/None and lists of them.

        Raises
        ------
        ValueError
            A value is not such a plain value (it could not be saved in a
            weights-only checkpoint).
        """
        named = [(f"argument {i}", v) for i, v in enumerate(self.args)] + [(f"kwarg {k}", v) for k, v in self.kwargs.items()]
        for what, value in named:
            items = value if isinstance(value, (list, tuple)) else [value]
            if not all(isinstance(v, _PLAIN_TYPES) for v in items):
                raise ValueError(f"architecture {what}={value!r} is not a plain str/int/float/bool/None value")
        kwargs = {k: list(v) if isinstance(v, tuple) else v for k, v in self.kwargs.items()}
        file = self.factory_file  # absolute, so a run replays from any folder
        name = f"{file}:{self.name.rpartition(':')[2]}" if file is not None else self.name
        out: dict[str, Any] = {"name": name, "kwargs": kwargs}
        if self.args:
            out["args"] = [list(v) if isinstance(v, tuple) else v for v in self.args]
        return out

    @classmethod
    def from_dict(cls, d: Mapping) -> ArchSpec:
        """Inverse of :meth:`to_dict`, for a spec the user gave (no trust rule: see :meth:`from_file`)."""
        return cls(name=str(d["name"]), kwargs=dict(d.get("kwargs") or {}), args=tuple(d.get("args") or ()))

    @classmethod
    def from_file(cls, d: Mapping | str, origin: str | Path, *, trust: bool = False) -> ArchSpec:
        """A spec read from a file (a checkpoint's or safetensors header's ``arch``, a run.toml's ``[model]``).

        Applies the trust rule of the contributions registry
        (:mod:`workbench.core.contrib`): registered names (builtins, torchvision,
        installed packages' entry points) resolve as they are; any other ``pkg.mod:callable`` /
        ``file.py:callable`` needs ``trust``, and a relative file path then
        resolves against ``origin``'s folder. Nothing is imported here.

        Parameters
        ----------
        d : mapping or str
            ``{"name": ..., "kwargs": {...}}`` (``"args": [...]`` optional),
            ``"resnet18(num_classes=10)"`` or a timm training dict's ``"resnet50d"``.
        origin : str or Path
            The file that holds the spec.
        trust : bool
            The user agreed to run code this file names.

        Raises
        ------
        TrustRequired
            The spec names code that is not a registered contribution and
            ``trust`` is False.
        ArchitectureError
            A malformed entry, or kwargs that are not plain data.
        """
        if isinstance(d, str):
            spec = cls.parse(d)
            name, kwargs, args = spec.name, spec.kwargs, spec.args
        elif isinstance(d, Mapping) and "name" in d:
            name, kwargs, args = d["name"], d.get("kwargs"), d.get("args")
        else:
            raise ArchitectureError(f"{origin}: the architecture entry must name an architecture, not {d!r}")
        kwargs = contrib.plain_kwargs(kwargs, origin)
        args = contrib.plain_args(args, origin)
        base = contrib.check("architecture", name, origin, trust=trust)
        if base is None:  # a registered builder: a file never makes it download
            contrib.no_downloads(kwargs, origin)
        return cls(name=name, kwargs=kwargs, base=base, args=args)

    @classmethod
    def parse(cls, text: str, **kwargs: Any) -> ArchSpec:
        """Parse ``"resnet18"``, ``"resnet18(num_classes=10)"``, ``"my.mod:make(width=2)"`` or a factory call.

        Arguments in parentheses are Python literals, positional ones first
        (``"timm:create_model('resnet50d', num_classes=10)"``); ``kwargs``
        given here win. Python's own call syntax ``"timm.create_model('resnet50d')"``
        (a dotted name that is not a registered one, with parentheses) means
        the spec ``"timm:create_model"``: code, under the trust rule like any spec.

        Raises
        ------
        ArchitectureError
            Malformed text, or arguments that are not literals.
        """
        text = text.strip()
        parsed: dict[str, Any] = {}
        args: tuple = ()
        called = text.endswith(")") and "(" in text
        if called:
            head, rest = text.split("(", 1)
            try:
                call = ast.parse(f"f({rest}", mode="eval").body
                if not isinstance(call, ast.Call):
                    raise ValueError("not a call")
                if any(isinstance(a, ast.Starred) for a in call.args) or any(kw.arg is None for kw in call.keywords):
                    raise ValueError("no *args or **kwargs")
                args = tuple(ast.literal_eval(a) for a in call.args)
                parsed = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}
            except (SyntaxError, ValueError) as exc:
                raise ArchitectureError(
                    f"architecture {text!r}: cannot read its arguments ({exc}). Write e.g. resnet18(num_classes=10)."
                ) from exc
            text = head.strip()
        if not text:
            raise ArchitectureError("empty architecture name. Give a torchvision name such as resnet18 or a factory spec pkg.mod:fn.")
        if called and _DOTTED_CALL.fullmatch(text) and not contrib.is_registered("architecture", text):
            module, _, attr = text.rpartition(".")
            text = f"{module}:{attr}"
        if args and ":" not in text:
            raise ArchitectureError(f"architecture {text!r} takes keyword arguments only (e.g. {text}(num_classes=10)); "
                                    "positional arguments are for factory specs such as "
                                    "timm:create_model('resnet50d', num_classes=10).")
        return cls(name=text, kwargs={**parsed, **kwargs}, args=args)

    def __str__(self) -> str:
        args = ", ".join([repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()])
        return f"{self.name}({args})" if args else self.name


#: Longest :func:`short_name`, characters (a table cell, a dialog's first line); a longer one ends with "…".
SHORT_NAME_CHARS = 48
#: Workbench's builders of an opened model folder (``"pkg.mod:callable"``, before and after they moved).
_HF_BUILDERS = ("workbench.core.model.hf_build:build_hf_model", "workbench.core.model.hf_folder:build_hf_model")
_TIMM_BUILDERS = ("workbench.core.model.hf_build:build_timm_model", "workbench.core.model.hf_folder:build_timm_model")


def short_name(spec: ArchSpec | Mapping | str | None, source: str | Path | None = None) -> str:
    """What to call an architecture in a table cell or a dialog's first line: its class or name, never its config.

    ``build_hf_model(architecture='LlamaForCausalLM', config_json='{…}')`` is
    ``LlamaForCausalLM`` (the config's ``architectures[0]`` or ``model_type`` when
    the spec has no ``architecture``), a timm folder's builder its model name
    (``resnet50d``), a registered name itself (``resnet18``), a factory spec
    ``pkg.mod:make_net`` its callable (``make_net``; ``timm:create_model('resnet50d')``
    the name it is given). Nothing is imported or built.

    Parameters
    ----------
    spec : ArchSpec, mapping, str or None
        An :class:`ArchSpec`, its :meth:`ArchSpec.to_dict` form (a run.toml's ``[model]``:
        ``{"name"/"arch": ..., "kwargs": {...}}``) or its text (``"resnet18(num_classes=10)"``).
    source : str or Path, optional
        The file or folder the model came from: its name when the spec names nothing better.

    Returns
    -------
    str
        At most :data:`SHORT_NAME_CHARS` characters; ``""`` when neither names anything.
    """
    name, kwargs, args = _parts(spec)
    name = contrib.MOVED_SPECS.get(name, name)
    if name in _HF_BUILDERS:
        text = kwargs.get("architecture") or _config_name(kwargs.get("config_json")) or _source_name(source)
        text = text or "transformers model"
    elif name in _TIMM_BUILDERS:
        text = kwargs.get("model_name") or (args[0] if args else "") or _source_name(source) or "timm model"
    elif ":" in name:
        text = args[0] if args and isinstance(args[0], str) else name.rpartition(":")[2]
    else:
        text = name or _source_name(source)
    text = str(text).strip()
    return text if len(text) <= SHORT_NAME_CHARS else text[:SHORT_NAME_CHARS - 1] + "…"


def _parts(spec) -> tuple[str, dict, tuple]:
    """``(name, kwargs, args)`` of whatever :func:`short_name` was given (never raises)."""
    if isinstance(spec, ArchSpec):
        return spec.name, dict(spec.kwargs), tuple(spec.args)
    if isinstance(spec, Mapping):
        kwargs, args = spec.get("kwargs"), spec.get("args")
        return (str(spec.get("name") or spec.get("arch") or ""), dict(kwargs) if isinstance(kwargs, Mapping) else {},
                tuple(args) if isinstance(args, (list, tuple)) else ())
    if isinstance(spec, str) and spec.strip():
        try:
            parsed = ArchSpec.parse(spec)
        except ArchitectureError:
            return spec.strip(), {}, ()
        return parsed.name, parsed.kwargs, parsed.args
    return "", {}, ()


def _config_name(config_json) -> str:
    """A transformers config's ``architectures[0]`` or ``model_type`` ("" when it names neither or is not JSON)."""
    import json

    try:
        config = json.loads(config_json) if isinstance(config_json, str) else None
    except ValueError:
        return ""
    if not isinstance(config, dict):
        return ""
    names = config.get("architectures")
    if isinstance(names, list) and names and isinstance(names[0], str):
        return names[0]
    return config.get("model_type") if isinstance(config.get("model_type"), str) else ""


def _source_name(source) -> str:
    """The last part of a path (a model folder's name), "" for none."""
    if not source:
        return ""
    return Path(str(source).rstrip("/\\")).name
