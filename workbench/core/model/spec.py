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
