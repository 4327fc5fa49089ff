"""The one way a command runs: build its parser, parse, run, and turn every error into one line and an exit code.

A command is a module of :mod:`workbench.cli` with ``NAME``, ``USAGE``,
``SUMMARY`` (its line in ``workbench --help``), ``DESCRIPTION``, ``EPILOG``
(text or None), ``SUBJECT`` (the argument that names what it works on, or
None), ``add_arguments(parser)`` and ``run(args) -> int``. :func:`run_command`
adds ``--debug`` to every command and guards ``run``:

- :class:`CommandFailed` (raised by a command): its message, its code;
- a :class:`~workbench.core.errors.WorkbenchError`: its message, exit 1;
- an ``OSError``: the file, the system's reason and what to check, exit 1;
- anything else (a bug, an unforeseen torch error): one line, exit 1.

Tracebacks are printed only with ``--debug``. argparse's own exits (``--help``
0, a usage error 2) are returned, never raised.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from types import ModuleType

from workbench.cli.output import fail

__all__ = ["CommandFailed", "command_parser", "run_command"]


class CommandFailed(Exception):
    """Ends a command with ``error: <message>`` on stderr and exit code ``code``.

    Parameters
    ----------
    message : str
        What went wrong, which file, what to do.
    code : int
        1 (the command failed, the default) or 2 (a usage error).
    """

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def command_parser(command: ModuleType) -> argparse.ArgumentParser:
    """The argument parser of ``workbench <command.NAME>``: the command's arguments, then ``--debug``."""
    layout = argparse.RawDescriptionHelpFormatter if command.EPILOG else argparse.HelpFormatter  # examples as written
    parser = argparse.ArgumentParser(prog=f"workbench {command.NAME}", description=command.DESCRIPTION,
                                     epilog=command.EPILOG, formatter_class=layout)
    command.add_arguments(parser)
    parser.add_argument("--debug", action="store_true", help="print tracebacks on errors")
    return parser


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace | int:
    """The parsed arguments, or the exit code argparse chose (``--help``: 0, a usage error: 2)."""
    try:
        return parser.parse_args(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)


def run_command(command: ModuleType, argv: Sequence[str]) -> int:
    """Run ``workbench <command.NAME>`` with ``argv`` (the arguments after its name).

    Parameters
    ----------
    command : module
        A command module (see the module docstring).
    argv : sequence of str

    Returns
    -------
    int
        The exit code: ``run``'s, argparse's (0 for ``--help``, 2 for a usage
        error), or the guard's for an error (see the module docstring).
    """
    args = _parse(command_parser(command), argv)
    if isinstance(args, int):
        return args
    return _guarded(command, args)


def _guarded(command: ModuleType, args: argparse.Namespace) -> int:
    """``command.run(args)``'s exit code; any error it raises becomes one ``error:`` line."""
    from workbench.core.errors import WorkbenchError

    subject = str((getattr(args, command.SUBJECT, None) if command.SUBJECT else None) or command.NAME)
    try:
        return int(command.run(args))
    except CommandFailed as exc:
        return fail(str(exc), args.debug, code=exc.code)
    except WorkbenchError as exc:
        return fail(str(exc), args.debug)
    except OSError as exc:
        where = exc.filename or subject
        return fail(f"{where}: {exc.strerror or exc}: check the path, its permissions and the free disk space",
                    args.debug)
    except Exception as exc:  # noqa: BLE001 - a bug or an unforeseen torch error: one line unless --debug
        return fail(f"{subject}: unexpected error: {type(exc).__name__}: {exc} (--debug prints the traceback)",
                    args.debug)
