"""Whether a recorded process id is a live Workbench training process: :func:`is_training_process`.

A run folder's ``status.json`` records the pid (and its start time) of the
process training in it; a folder with a live one is not renamed or deleted
(:func:`refuse_if_training`). The pid is trusted only by its command line and
start time (``/proc`` where there is one). Qt-free.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from workbench.core.run_folder.printable import printable
from workbench.core.run_folder.reading import RunFileError
from workbench.core.run_folder.status import read_status

__all__ = ["RunIsTraining", "process_start_time", "is_training_process", "training_pid", "refuse_if_training"]


class RunIsTraining(OSError):
    """The run folder belongs to a live training process: it is not renamed or deleted."""


def _proc_stat(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` from field 3 (state) on; None where there is no such process."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            data = f.read(4096)
    except (OSError, ValueError, OverflowError):
        return None
    return data[data.rfind(b")") + 2:].split()  # the name (field 2) may hold spaces and parentheses


def process_start_time(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (Linux: field 22 of ``/proc/PID/stat``).

    None where there is no ``/proc``, or no such live process (a zombie counts as gone).
    """
    fields = _proc_stat(pid)
    if fields is None or len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None
    try:
        return int(fields[19])
    except ValueError:
        return None


def _parent_pid(pid: int) -> int | None:
    """The parent of process ``pid`` (field 4 of ``/proc/PID/stat``); None when unknown."""
    fields = _proc_stat(pid)
    try:
        return int(fields[1]) if fields is not None and len(fields) > 1 else None
    except ValueError:
        return None


def _cmdline(pid: int) -> list[str] | None:
    """``/proc/PID/cmdline`` as a list of arguments; None when it cannot be read (or is empty: a kernel thread)."""
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as f:
            data = f.read(65536)
    except (OSError, ValueError, OverflowError):
        return None
    argv = [os.fsdecode(a) for a in data.split(b"\0")]
    while argv and not argv[-1]:
        argv.pop()
    return argv or None


def _stem(arg: str) -> str:
    """The lower-case base name of a program or script, without ``.exe`` / ``.py`` / ``-script.py``."""
    name = os.path.basename(arg).lower()
    for suffix in ("-script.py", "-script.pyw", ".exe", ".py", ".pyw"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _python_target(argv: list[str]) -> tuple[str, str] | None:
    """What a Python command line runs: ``("m", module)``, ``("c", code)`` or ``("script", path)``; None: nothing.

    Python's own options before it are skipped as the interpreter reads them
    (``-u``, ``-X dev``, ``-W error``, ``-uBm mod``); an argument after the target is
    the program's own, never taken for ``-m``.
    """
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return ("script", argv[i + 1]) if i + 1 < len(argv) else None
        if not arg.startswith("-") or arg == "-":
            return "script", arg
        if arg.startswith("--"):
            i += 1
            continue
        for j in range(1, len(arg)):
            flag = arg[j]
            if flag in "mcWX":  # the rest of the argument, or the next one, is the option's value
                value = arg[j + 1:]
                if not value:
                    i += 1
                    value = argv[i] if i < len(argv) else ""
                if flag in "mc":
                    return flag, value
                break
        i += 1
    return None


def _is_python(program: str) -> bool:
    name = _stem(program)
    return "python" in name or "pypy" in name or name == _stem(sys.executable)


#: Python code of a ``multiprocessing`` child (spawn and forkserver start methods): who it is depends on its parent.
_MP_CHILD_CODE = ("from multiprocessing.spawn import spawn_main", "from multiprocessing.forkserver import main")


def _command_kind(argv: list[str]) -> str | None:
    """``"workbench"`` for a command line of a Workbench process, ``"child"`` for a multiprocessing child, else None.

    A Workbench process: the ``workbench`` program (a frozen executable, or the
    console script Python runs: ``python .../bin/workbench``), or ``python -m
    workbench`` / ``-m workbench.<module>`` (the window, the CLI, the ranks of a
    data-parallel run, ``workbench.core.train.launch.parent_watch``).
    """
    if _stem(argv[0]) == "workbench":
        return "workbench"
    if not _is_python(argv[0]):
        return None
    target = _python_target(argv)
    if target is None:
        return None
    kind, value = target
    if kind == "m" and (value == "workbench" or value.startswith("workbench.")):
        return "workbench"
    if kind == "script" and (_stem(value) == "workbench"
                             or value.replace(os.sep, "/").endswith("/workbench/__main__.py")):
        return "workbench"
    if (kind == "c" and value.startswith(_MP_CHILD_CODE)) or "--multiprocessing-fork" in argv:
        return "child"
    return None


def _is_workbench_process(pid: int, depth: int = 0) -> bool:
    """Whether the live process ``pid`` runs Workbench (Linux: from ``/proc/PID/cmdline``).

    This very process is one (it is running this code: the tests' in-process
    trainers, the window's own thread). A ``multiprocessing`` child (the
    window's training process) is one when its parent is.
    """
    if pid == os.getpid():
        return True
    argv = _cmdline(pid)
    kind = _command_kind(argv) if argv else None
    if kind == "child" and depth < 4:
        parent = _parent_pid(pid)
        return parent is not None and parent > 1 and _is_workbench_process(parent, depth + 1)
    return kind == "workbench"


def _alive_elsewhere(pid: int) -> bool:
    """Whether ``pid`` is alive, where there is no /proc (its identity cannot be checked there)."""
    if sys.platform == "win32":  # os.kill(pid, 0) would end the process on Windows
        import ctypes

        kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
        handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
        if not handle:
            return False
        code = ctypes.c_ulong()
        try:
            return bool(kernel32.GetExitCodeProcess(handle, ctypes.byref(code))) and code.value == 259
        finally:
            kernel32.CloseHandle(handle)
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except OSError:
        return False
    return True


#: Above any process id of Linux (2**22), macOS or Windows; a larger "pid" is no process (os.kill would overflow).
_MAX_PID = 2**31 - 1


def is_training_process(pid: object, start: object = None, attached: bool = False) -> bool:
    """Whether a ``status.json``'s ``pid`` (and ``pid_start``) name a live Workbench training process.

    A recorded pid is trusted only if it is a positive pid (``os.kill(0, 0)``
    would signal this process's group, ``-1`` every process) of a live process
    whose command line is a Workbench process. Where ``/proc`` exists: alive and
    not a zombie, started at ``start`` (when recorded: a reused pid fails), and
    its ``/proc/PID/cmdline`` the ``workbench`` program or console script,
    ``python -m workbench[.<module>]``, or a ``multiprocessing`` child of such a
    process (the window's training process); this very process counts too (it
    runs Workbench: a trainer on one of its threads, as in the tests). Any other
    process (a plain ``python``, ``sleep``) that took the pid of a dead run is
    not. Elsewhere being alive is all that can be checked. ``attached`` (a
    ``status.json`` written by a user's own script through ``workbench.attach``):
    any program counts, as long as its recorded start time matches (required then).
    """
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid <= _MAX_PID:
        return False
    if os.path.exists("/proc/self/stat"):
        began = process_start_time(pid)
        if began is None or (isinstance(start, int) and not isinstance(start, bool) and began != start):
            return False
        if attached:  # the user's own python script: its identity is its start time
            return isinstance(start, int) and not isinstance(start, bool)
        return _is_workbench_process(pid)
    return _alive_elsewhere(pid)


def training_pid(folder: str | Path) -> int | None:
    """The pid of the live training process of a run folder (its ``status.json`` says running); None if none.

    An unreadable ``status.json`` is no evidence of a live run: None.
    """
    try:
        status = read_status(folder)
    except RunFileError:
        return None
    if not status or status.get("state") != "running":
        return None
    pid = status.get("pid")
    return pid if is_training_process(pid, status.get("pid_start"), status.get("attached") is True) else None


def refuse_if_training(folder: str | Path, action: str) -> None:
    """Raise :class:`RunIsTraining` when a live process is training in ``folder``.

    Parameters
    ----------
    action : str
        What was asked, for the message (``"rename"``, ``"delete"``).
    """
    pid = training_pid(folder)
    if pid is not None:
        name = printable(Path(folder).name)
        raise RunIsTraining(f"{name} is training (process {pid}): stop the run before you {action} it")
