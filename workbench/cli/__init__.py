"""The ``workbench`` command: the window, and the commands without it.

``workbench [PATH] [--arch NAME|SPEC] [--trust] ...``
    Open the desktop app (:func:`workbench.ui.app.main`, :mod:`.window`).
``workbench COMMAND ...``
    One module per command (:data:`COMMANDS`): :mod:`.inspect` (a checkpoint's
    metadata, load report, module tree, shapes and FLOPs), :mod:`.train` and
    :mod:`.lr_find` (from a run file, without the window), :mod:`.diff`,
    :mod:`.runs`, :mod:`.contributions`, :mod:`.index` (the architecture
    index), :mod:`.graph` (the dataflow graph as JSON, SVG or PNG), :mod:`.export` (a run's
    checkpoint as a ``save_pretrained`` folder), :mod:`.submit`, :mod:`.pull`, :mod:`.cancel`,
    :mod:`.attach_remote` (``attach --host``) and ``runs --host`` (a run on an SSH host or a SLURM cluster; :mod:`.remote` the older spelling).

Every command module has the same shape (``NAME``, ``USAGE``, ``SUMMARY``,
``DESCRIPTION``, ``EPILOG``, ``SUBJECT``, ``add_arguments(parser)``,
``run(args) -> int``) and runs through one guard
(:func:`.guard.run_command`): every error is one line on stderr,
``error: <what, which file, what to do>``, exit 1 (2 for a usage error), and a
traceback only with ``--debug``. :mod:`.output` prints (escaping what comes from
files), :mod:`.arguments` holds the argument types commands share.

``workbench --help`` lists the commands (:func:`top_level_help`); a bare word
that is neither a command nor an existing file (``workbench foo``) is a usage
error, exit 2, and opens no window. Code that a file names (a pickle's classes,
TorchScript, an architecture or factory spec that is not a registered
contribution) runs only with ``--trust``; a spec given with ``--arch`` is the
user's own and needs none.

Imports are lazy: torch is imported when a command needs it, Qt only for the
window and a ``.png`` graph.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from workbench.cli import contributions, diff, export, graph, index, inspect, lr_find, runs, train
from workbench.cli import attach_remote, cancel, pull, remote, submit
from workbench.cli.guard import run_command
from workbench.cli.output import fail
from workbench.cli.window import looks_like_a_command, open_window, window_parser, window_path
from workbench.core.hub_offline import offline_by_default

__all__ = ["main", "top_level_help", "COMMANDS"]

#: The commands, in the order ``workbench --help`` lists them: name -> its module.
COMMANDS: dict[str, ModuleType] = {
    command.NAME: command for command in (inspect, train, lr_find, diff, runs, contributions, index, graph,
                                          export, submit, pull, cancel, attach_remote, remote)
}


def top_level_help() -> str:
    """``workbench --help``: every command with one line, then the window's own options."""
    forms = [("workbench [PATH]", "open the window on a checkpoint (default: the built-in demo)")]
    forms += [(f"workbench {name} {command.USAGE}", command.SUMMARY) for name, command in COMMANDS.items()]
    width = max(len(form) for form, _ in forms)
    lines = ["usage: workbench [PATH] [--arch NAME|SPEC] [--trust] [--in-process] [--screenshot OUT.png]",
             "       workbench COMMAND ...  (workbench COMMAND --help: its options)",
             "       workbench --version",
             "",
             "commands:"]
    lines += [f"  {form:<{width}}  {text}" for form, text in forms]
    gui = window_parser()
    gui.usage = argparse.SUPPRESS
    gui.description = "options of the window (workbench [PATH]):"
    lines += ["", gui.format_help().strip()]
    return "\n".join(lines) + "\n"


def _unknown_command(word: str) -> int:
    """``workbench foo`` where ``foo`` is neither a command nor an existing path: exit 2 with one line."""
    near = difflib.get_close_matches(word, list(COMMANDS), n=1)
    hint = f"; did you mean {near[0]}?" if near else ""
    return fail(f"no such file or command: {word}; commands: {', '.join(COMMANDS)}{hint}", False, code=2)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``workbench`` console script and ``python -m workbench``.

    ``workbench COMMAND ...`` runs a command of :data:`COMMANDS`; anything
    else opens the window (:func:`workbench.ui.app.main`), except a bare word
    that is neither a command nor an existing file (``workbench foo``), which
    is a usage error (exit 2) naming the commands. Sets the Hugging Face Hub
    offline (:func:`~workbench.core.hub_offline.offline_by_default`) unless the
    user set ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name; default ``sys.argv[1:]``.

    Returns
    -------
    int
        The process exit code.
    """
    offline_by_default()  # before anything imports huggingface_hub: nothing a file names is fetched
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["--version"], ["-V"]):
        from workbench.core.versions import version_line

        print(version_line())
        return 0
    if argv and argv[0] in COMMANDS:
        return run_command(COMMANDS[argv[0]], argv[1:])
    if "-h" in argv or "--help" in argv:
        print(top_level_help(), end="")
        return 0
    path = window_path(argv)
    if path is not None and looks_like_a_command(path) and not Path(path).exists():
        return _unknown_command(path)
    return open_window(argv)
