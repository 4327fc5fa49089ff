"""A run on an SSH host: start it detached, ask how it is, stop it with a save, bring its folder back.

The remote folder of a run is ``REMOTE_DIR/NAME`` (default ``~/workbench-runs/NAME``):
the copied ``run.toml`` and what it needs (:mod:`.bundle`), ``pid`` (the training
process), ``train.log`` (its stdout and stderr) and ``run/`` (the run folder it
writes: ``metrics.csv``, ``status.json``, ``last.pt``...).

The run is started with ``setsid nohup`` in its own session, its output in
``train.log`` and its input from ``/dev/null``: it survives the SSH connection
(a closed terminal's SIGHUP never reaches it). Every command sent is one
``sh -c`` line whose words are quoted (:func:`shlex.quote`): a run name with a
space, a quote or ``;`` is a name, never a command.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from workbench.core.remote.bundle import RUN_SUBDIR, bundle, stage
from workbench.core.remote.ssh import RemoteError, Ssh, home_relative

__all__ = ["DEFAULT_REMOTE_DIR", "STOP_WAIT_S", "Started", "RemoteStatus", "default_name", "check_name",
           "launch_line", "upload", "start", "status", "stop", "pull", "remote_folder",
           "alive_test", "sh", "READ_PID"]

#: Where runs go on a host unless ``--remote-dir`` says otherwise (relative to the remote home folder).
DEFAULT_REMOTE_DIR = "~/workbench-runs"
#: Seconds ``stop`` waits for the run to reach a step boundary and save ``last.pt`` (a slow step on a busy GPU,
#: a large checkpoint to write) before saying it is still stopping.
STOP_WAIT_S = 120.0
#: Files of a remote run folder, beside ``run.toml``.
PID_FILE, LOG_FILE = "pid", "train.log"
#: The private folder (0700) of a detached run's attach discovery file, in its remote folder beside ``run/``.
ATTACH_SUBDIR = ".attach"
#: Bytes of ``status.json`` read back (a real one is ~300 bytes; a bad file is never read whole).
_STATUS_BYTES = 65536
_MARK = "--workbench-remote--"
#: Shell: ``pid`` from the pid file, emptied unless it is a number (a damaged file names no process).
READ_PID = f"pid=$(head -c 32 {PID_FILE} 2>/dev/null); case \"$pid\" in ''|*[!0-9]*) pid= ;; esac"


@dataclass(frozen=True)
class Started:
    """A run started on a host: ``folder`` its remote folder (absolute, as the host's ``pwd`` says)."""

    host: str
    name: str
    folder: str
    pid: int


@dataclass(frozen=True)
class RemoteStatus:
    """How a remote run is.

    Attributes
    ----------
    alive : bool
        Its training process is running.
    pid : int or None
        That process, from the ``pid`` file.
    state : str
        ``status.json``'s state (``running``, ``finished``, ``stopped``, ``crashed``), ``starting`` when the
        process lives and has not written it yet, ``unknown`` when it is gone without one.
    reason : str or None
        ``status.json``'s reason (``completed``, ``stopped``, ``error``...).
    log_line : str
        The last line of ``train.log`` (as it is: escape it before printing).
    """

    alive: bool
    pid: int | None
    state: str
    reason: str | None
    log_line: str


def check_name(name: str) -> str:
    """``name`` when it can name a remote run folder: one path component, printable, not ``.``/``..``.

    Raises
    ------
    RemoteError
        It cannot (says what to choose instead).
    """
    if (not name or name in (".", "..") or "/" in name or name.startswith("-")
            or any(ord(c) < 32 or ord(c) == 127 for c in name)):
        raise RemoteError(f"run name {name!r}: give a folder name (no '/', no control characters, not starting "
                          "with '-')")
    return name


def default_name(run_toml: str | Path) -> str:
    """A new run's name: the run file's folder (or its stem when not ``run.toml``) and the time, ``mnist-20250101-120000``."""
    p = Path(run_toml).resolve()
    stem = p.stem if p.stem != "run" else p.parent.name
    return f"{stem or 'run'}-{time.strftime('%Y%m%d-%H%M%S')}".lstrip("-.")


def remote_folder(remote_dir: str, name: str) -> str:
    """The remote folder of run ``name`` under ``remote_dir``, as ssh and rsync read it (home-relative)."""
    return f"{home_relative(remote_dir).rstrip('/') or '/'}/{check_name(name)}".replace("//", "/")


def sh(script: str) -> str:
    """``script`` run by ``sh`` whatever the remote login shell is (fish, csh...)."""
    return f"sh -c {shlex.quote(script)}"


def launch_line(*, trust: bool = False, nproc_per_node: int = 0) -> str:
    """The shell line, run in a remote run folder, that starts ``workbench train run.toml`` detached; prints the pid.

    ``setsid`` gives it a session of its own and ``nohup`` ignores SIGHUP: a connection that drops (a terminal
    that closes) does not end it. Output goes to ``train.log`` unbuffered, input is ``/dev/null``. Its attach
    discovery file goes to the run's own private :data:`ATTACH_SUBDIR` (beside ``run/``, so a pull never copies
    the token): the default, ``$XDG_RUNTIME_DIR``, is removed by systemd-logind when the user's last ssh
    session ends, which would leave a detached run unfindable by :func:`~.waiting.read_waiting`.
    """
    argv = ["workbench", "train", "run.toml"] + (["--trust"] if trust else [])
    if nproc_per_node > 1:
        argv += ["--nproc-per-node", str(int(nproc_per_node))]
    return (f"command -v workbench >/dev/null || {{ echo 'workbench is not on the PATH of the host; "
            f"pip install workbench there' >&2; exit 127; }}; "
            f"mkdir -m 700 -p {ATTACH_SUBDIR} || exit 1; "  # its own statement: `a && b &` would put the
            f"WORKBENCH_ATTACH_DIR=\"$PWD/{ATTACH_SUBDIR}\" "  # mkdir and the run in one background subshell
            f"PYTHONUNBUFFERED=1 setsid nohup {shlex.join(argv)} > {LOG_FILE} 2>&1 < /dev/null & "
            f"echo $! > {PID_FILE}; echo $!")


def upload(ssh: Ssh, host: str, run_toml: str | Path, *, remote_dir: str = DEFAULT_REMOTE_DIR,
           name: str | None = None, sync: tuple[str | Path, ...] | list = (),
           extra: dict[str, str] | None = None) -> tuple[str, str]:
    """Copy ``run_toml``, what it needs, the ``sync`` folders and the ``extra`` files into a new run folder on ``host``.

    Parameters
    ----------
    sync : sequence of path
        Local folders (or files) copied as they are to the run folder's top (``data/`` arrives as ``data/``), for
        what a run reads without its run file naming it. Relative paths in the run file start at the run folder.
    extra : dict of str to str
        More files to write there: name -> text (a batch script).

    Returns
    -------
    (str, str)
        The run's name and its remote folder (home-relative unless ``remote_dir`` is absolute).

    Raises
    ------
    RemoteError
        A file is missing here (the key named), the name is taken, a sync folder is missing or clashes with a
        carried name, or ssh / rsync failed (the half-copied folder is removed).
    """
    b = bundle(run_toml)
    for item in sync:
        local = Path(item).expanduser()
        if not local.exists():
            raise RemoteError(f"--sync {item}: no such folder here; give an existing folder to copy")
        top = local.resolve().name
        if top in b.files or top in ("run.toml", RUN_SUBDIR, PID_FILE, LOG_FILE) or top in (extra or {}):
            raise RemoteError(f"--sync {item}: its name {top!r} is taken in the run folder; rename the folder")
        b.files[top] = local.resolve()
    name = check_name(name or default_name(run_toml))
    folder = remote_folder(remote_dir, name)
    q = shlex.quote(folder)
    made = ssh.run(host, sh(f"if [ -e {q} ]; then echo exists; else mkdir -p -- {q} && echo made; fi"),
                   what=f"make the run folder {folder}")
    if made.strip() != "made":
        raise RemoteError(f"{host}: {folder} exists already; choose another --name")
    try:
        with tempfile.TemporaryDirectory(prefix="workbench-remote-") as tmp:
            stage(b, tmp)
            for file, text in (extra or {}).items():
                (Path(tmp) / file).write_text(text)
            ssh.rsync(host, [f"{tmp}/"], f"{host}:{folder}/", what=f"copy the run to {folder}",
                      options=("--copy-links",))
    except (RemoteError, OSError):
        with contextlib.suppress(RemoteError):  # no half-copied run left to be mistaken for one
            ssh.run(host, sh(f"rm -rf -- {q}"), what=f"remove the half-copied {folder}")
        raise
    return name, folder


def start(ssh: Ssh, host: str, run_toml: str | Path, *, remote_dir: str = DEFAULT_REMOTE_DIR,
          name: str | None = None, trust: bool = False, sync: tuple[str | Path, ...] | list = (),
          nproc_per_node: int = 0) -> Started:
    """Copy ``run_toml`` and what it needs to ``host`` and start it there detached.

    Parameters
    ----------
    ssh : Ssh
    host : str
    run_toml : str or Path
    remote_dir : str
        The folder of runs on the host.
    name : str, optional
        The run's folder name there (default :func:`default_name`); an existing one is refused.
    trust : bool
        Pass ``--trust`` (the run file names code; the caller decided to trust it).
    sync : sequence of path
        Local folders copied beside the run file (:func:`upload`).
    nproc_per_node : int
        More than 1: ``workbench train --nproc-per-node N`` (data-parallel on the host's GPUs or CPUs).

    Raises
    ------
    RemoteError
        The run file or a file it names is missing here, the name is taken, ssh or rsync failed, or the
        host lacks ``workbench``.
    """
    name, folder = upload(ssh, host, run_toml, remote_dir=remote_dir, name=name, sync=sync)
    q = shlex.quote(folder)
    out = ssh.run(host, sh(f"cd -- {q} && pwd && {launch_line(trust=trust, nproc_per_node=nproc_per_node)}"),
                  what="start the run")
    lines = out.strip().splitlines()
    try:
        pid = int(lines[-1])
    except (ValueError, IndexError):
        raise RemoteError(f"{host}: the run did not start (the host said {out.strip()[-200:]!r}); "
                          f"see {folder}/{LOG_FILE}") from None
    return Started(host, name, lines[0] if len(lines) > 1 else folder, pid)


def alive_test(pid_var: str = "$pid") -> str:
    """A shell test: the process ``pid_var`` is a live ``workbench`` (a zombie or a reused pid is not)."""
    return (f"[ -n \"{pid_var}\" ] && [ -r /proc/{pid_var}/cmdline ] && "
            f"tr '\\0' ' ' < /proc/{pid_var}/cmdline | grep -q workbench")


def status(ssh: Ssh, host: str, name: str, *, remote_dir: str = DEFAULT_REMOTE_DIR) -> RemoteStatus:
    """How run ``name`` on ``host`` is: alive, its pid, ``status.json``'s state and reason, the log's last line.

    Raises
    ------
    RemoteError
        No such run on the host, or ssh failed.
    """
    folder = remote_folder(remote_dir, name)
    q = shlex.quote(folder)
    script = (f"cd -- {q} 2>/dev/null || {{ echo 'no such run folder' >&2; exit 3; }}; "
              f"{READ_PID}; echo \"$pid\"; "
              f"if {alive_test()}; then echo alive; else echo gone; fi; echo {_MARK}; "
              f"head -c {_STATUS_BYTES} {RUN_SUBDIR}/status.json 2>/dev/null; echo; echo {_MARK}; "
              f"tail -n 5 {LOG_FILE} 2>/dev/null; true")
    try:
        out = ssh.run(host, sh(script), what=f"read the run {name!r}")
    except RemoteError as e:
        if "(exit 3)" in str(e):
            raise RemoteError(f"{host}: no run {name!r} in {home_relative(remote_dir)}; "
                              "check the name (and --remote-dir)") from None
        raise
    head, _, rest = out.partition(f"{_MARK}\n")
    status_text, _, log = rest.partition(f"{_MARK}\n")
    lines = head.splitlines() + ["", ""]
    pid = int(lines[0]) if lines[0].strip().isdigit() else None
    alive = lines[1].strip() == "alive"
    try:
        record = json.loads(status_text) if status_text.strip() else {}
        record = record if isinstance(record, dict) else {}
    except ValueError:
        record = {}
    state = record.get("state") if isinstance(record.get("state"), str) else ("starting" if alive else "unknown")
    reason = record.get("reason") if isinstance(record.get("reason"), str) else None
    log_lines = [line for line in log.splitlines() if line.strip()]
    return RemoteStatus(alive, pid, state, reason, log_lines[-1] if log_lines else "")


def stop(ssh: Ssh, host: str, name: str, *, remote_dir: str = DEFAULT_REMOTE_DIR,
         wait_s: float = STOP_WAIT_S, mark: str | None = None) -> RemoteStatus:
    """Stop run ``name`` as Ctrl+C does (SIGTERM: the next step boundary, ``last.pt`` saved); wait up to ``wait_s``.

    SIGTERM goes to the training process (the session leader), not to its whole group: its data loader
    workers and ranks are ended by it, after the save.

    ``mark`` names a file made in the run's folder once the run is found running, before the signal
    (``cancelled``: :func:`workbench.core.remote.listing.probe` then says so).

    Returns
    -------
    RemoteStatus
        After it ended, or after ``wait_s`` (then still ``alive``).

    Raises
    ------
    RemoteError
        No such run, it is not running, or ssh failed.
    """
    folder = remote_folder(remote_dir, name)
    ticks = max(1, int(wait_s / 0.2))
    script = (f"cd -- {shlex.quote(folder)} 2>/dev/null || {{ echo 'no such run folder' >&2; exit 3; }}; "
              f"{READ_PID}; {alive_test()} || {{ echo 'not running' >&2; exit 4; }}; "
              + (f": > {shlex.quote(mark)}; " if mark else "") +
              f"kill -TERM \"$pid\"; i=0; while {alive_test()} && [ $i -lt {ticks} ]; do sleep 0.2; "
              f"i=$((i+1)); done")
    try:
        ssh.run(host, sh(script), what=f"stop the run {name!r}", timeout=wait_s + 60)
    except RemoteError as e:
        if "(exit 3)" in str(e):
            raise RemoteError(f"{host}: no run {name!r} in {home_relative(remote_dir)}; check the name") from None
        if "(exit 4)" in str(e):
            raise RemoteError(f"{host}: the run {name!r} is not running; nothing to stop") from None
        raise
    return status(ssh, host, name, remote_dir=remote_dir)


def pull(ssh: Ssh, host: str, name: str, dest: str | Path | None = None, *,
         remote_dir: str = DEFAULT_REMOTE_DIR) -> Path:
    """Copy run ``name``'s run folder (and its ``train.log``) from ``host`` into ``dest/NAME``; that folder.

    Again later, only what changed is copied. ``dest`` defaults to the local runs root, so the window and
    ``workbench runs`` list the pulled run beside local ones.

    Raises
    ------
    RemoteError
        No such run (or it has not written its folder yet), or ssh / rsync failed.
    """
    from workbench.core.train.runs.folder import default_runs_root

    folder = remote_folder(remote_dir, name)
    target = Path(dest if dest is not None else default_runs_root()).expanduser() / name
    target.mkdir(parents=True, exist_ok=True)
    ssh.rsync(host, [f"{host}:{folder}/{RUN_SUBDIR}/", f"{host}:{folder}/{LOG_FILE}"], f"{target}/",
              what=f"copy {folder}/{RUN_SUBDIR} back (has the run started? workbench remote status)")
    return target
