"""``workbench submit --slurm`` against a real one-node SLURM cluster on 127.0.0.1 (tests/hosts/slurm.py), reached
through the real ssh test host (tests/hosts/sshd.py): sbatch, queued then running, cancel with last.pt saved,
pull, and a 2-process torch.distributed.run through srun.

The cluster is started once per session (~2 s); the two tests take ~15 s and ~25 s on 2 busy cores.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.hosts.sshd import ALIAS
from tests.remote.polling import wait_until
from workbench import cli, remote

pytestmark = [pytest.mark.remote, pytest.mark.slow]

#: Seconds a condition is waited for before the test fails (a job starts in ~1 s, a run's first epoch in ~5 s).
WAIT_S = 90.0


def _run_toml(tmp_path, epochs: int):
    path = tmp_path / "run.toml"
    path.write_text(f"epochs = {epochs}\ntensorboard = false\n[data]\ndataset = \"digits\"\nbatch_size = 256\n")
    return path


def _wait(condition, what: str):
    return wait_until(condition, what, WAIT_S)


def _host_args(host, remote_dir):
    return ["--host", ALIAS, "--ssh-config", str(host.config), "--remote-dir", remote_dir]


def test_a_slurm_run_is_queued_then_runs_and_cancel_ends_it_with_last_pt_saved(
        slurm_cluster, ssh_host, remote_dir, tmp_path, capsys):
    # a job holding the whole node first: the run waits for it ("queued"), deterministically
    blocker = ssh_host.ssh(shlex.join(["sbatch", "--parsable", "--exclusive", "--output=/dev/null",
                                       "--wrap", "sleep 300"]))
    assert blocker.returncode == 0, blocker.stderr
    name = "it's a; slurm job $(touch pwned)"  # a space, a quote, ';' and $( ): data, never a command
    assert cli.main(["submit", str(_run_toml(tmp_path, 10_000)), "--slurm", "--nodes", "1", "--name", name,
                     *_host_args(ssh_host, remote_dir)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"submitted {name} to {ALIAS}: SLURM job ")
    folder = ssh_host.home / remote_dir / name
    script = (folder / "job.sbatch").read_text()
    assert "#SBATCH --nodes=1\n" in script and "#SBATCH --output=train.log\n" in script
    assert "exec workbench train run.toml\n" in script
    [run] = [r for r in remote.runs(ALIAS, remote_dir=remote_dir, ssh_config=ssh_host.config) if r.id == name]
    assert run.job and run.run_dir == f"{folder}/run" and run.state() == "queued"
    assert cli.main(["runs", "--json", *_host_args(ssh_host, remote_dir)]) == 0
    listed = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed[name]["state"] == "queued" and listed[name]["job"] == run.job
    assert cli.main(["runs", *_host_args(ssh_host, remote_dir)]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith(name)]
    assert f"  queued     job {run.job}" in line and line.endswith(f"  {run.run_dir}")

    assert ssh_host.ssh("scancel", blocker.stdout.strip()).returncode == 0  # the node frees: the run starts
    _wait(lambda: run.state() == "running", "the job running")
    log = folder / "train.log"
    _wait(lambda: log.is_file() and "epoch 1/" in log.read_text(), "a first epoch in train.log")

    assert cli.main(["cancel", name, *_host_args(ssh_host, remote_dir)]) == 0
    assert capsys.readouterr().out.strip() == f"{name} on {ALIAS}: cancelled"
    assert run.state() == "cancelled"
    text = log.read_text()
    assert "stopping at the next step (SIGTERM" in text and "saved run/last.pt" in text  # within KillWait
    assert json.loads((folder / "run" / "status.json").read_text())["state"] == "stopped"

    dest = tmp_path / "pulled"
    assert cli.main(["pull", name, "--to", str(dest), *_host_args(ssh_host, remote_dir)]) == 0
    pulled = dest / name
    assert {"last.pt", "metrics.csv", "status.json", "train.log"} <= {p.name for p in pulled.iterdir()}
    inode = (pulled / "last.pt").stat().st_ino
    assert run.pull(dest) == pulled and (pulled / "last.pt").stat().st_ino == inode  # unchanged: not copied again
    assert not list(ssh_host.home.rglob("pwned")) and not list(tmp_path.rglob("pwned"))


def test_two_processes_run_through_srun_and_torch_distributed_run(slurm_cluster, ssh_host, remote_dir, tmp_path):
    run = remote.submit(_run_toml(tmp_path, 1), ALIAS, slurm=True, nodes=1, nproc_per_node=2, name="ddp two",
                        remote_dir=remote_dir, ssh_config=ssh_host.config)
    folder = ssh_host.home / remote_dir / "ddp two"
    script = (folder / "job.sbatch").read_text()
    assert "exec srun " in script and "-m torch.distributed.run" in script and "--nproc-per-node=2" in script
    assert "--rdzv-backend=c10d" in script
    ranks: set[int] = set()  # the rank processes seen on the node (torchrun's workers, not torchrun itself)

    def ended() -> bool:
        ranks.update(pid for pid in ssh_host.user_pids()
                     if "torchrun_rank" in (line := _cmdline(pid)) and "torch.distributed.run" not in line)
        return run.state() not in ("queued", "running")

    _wait(ended, "the 2-process job ended")
    log = (folder / "train.log").read_text()
    assert run.state() == "completed", log[-2000:]
    assert "finished: completed" in log
    assert json.loads((folder / "run" / "status.json").read_text())["reason"] == "completed"
    assert len(ranks) == 2


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
