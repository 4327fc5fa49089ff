"""The batch script, its checked values and the state of a SLURM run, run locally with stand-ins for SLURM's
programs (the real cluster is in tests/remote/test_slurm.py)."""

from __future__ import annotations

import os
import subprocess

import pytest

from workbench.core.remote import slurm
from workbench.core.remote.ssh import RemoteError


def _stub(bin_dir, name, body):
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def _run_script(tmp_path, script, env):
    """Run the batch script with ``srun``, ``scontrol``, ``workbench`` and ``python`` that print their words."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("srun", "workbench", "python"):
        _stub(bin_dir, name, f"echo {name}; for a in \"$@\"; do printf '%s\\n' \"$a\"; done")
    _stub(bin_dir, "scontrol", "printf 'node-a\\nnode-b\\n'")
    (tmp_path / "job.sbatch").write_text(script)
    done = subprocess.run(["sh", "job.sbatch"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", **env})
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_one_process_execs_workbench_train_so_slurm_s_sigterm_reaches_the_run(tmp_path):
    script = slurm.batch_script("it's a; run $(x)", partition="gpu", time="04:00:00", gpus_per_node=None)
    assert "#SBATCH --job-name=wb-it_s_a_run_x\n" in script  # letters, digits and _.- only
    assert "#SBATCH --partition=gpu\n" in script and "#SBATCH --time=04:00:00\n" in script
    assert "--gpus-per-node" not in script and "srun" not in script
    assert _run_script(tmp_path, script, {}) == ["workbench", "train", "run.toml"]


def test_more_processes_run_torch_distributed_run_on_every_node_through_srun(tmp_path):
    script = slurm.batch_script("x", nodes=2, gpus_per_node=4, nproc_per_node=4, trust=True)
    assert "#SBATCH --nodes=2\n" in script and "#SBATCH --gpus-per-node=4\n" in script
    words = _run_script(tmp_path, script, {"SLURM_JOB_ID": "1234", "SLURM_NNODES": "2",
                                           "SLURM_JOB_NODELIST": "node-[a-b]"})
    assert words[:4] == ["srun", "--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    assert words[4] == str(tmp_path / "bin" / "python")
    assert words[5:] == ["-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=4", "--rdzv-backend=c10d",
                         f"--rdzv-endpoint=node-a:{slurm.RDZV_PORT_BASE + 1234 % slurm.RDZV_PORT_SPAN}",
                         "--rdzv-id=1234", "-m", "workbench.core.attach.torchrun_rank", "run.toml", "--trust"]


@pytest.mark.parametrize("kwargs, message", [
    ({"partition": "gpu; rm -rf ~"}, "--partition"), ({"partition": "a b"}, "--partition"),
    ({"time": "ten minutes"}, "--time"), ({"time": "1:00:00\n#SBATCH --x"}, "--time"),
    ({"nodes": 0}, "--nodes"), ({"gpus_per_node": -1}, "--gpus-per-node"), ({"nproc_per_node": 1.5}, "--nproc")])
def test_a_value_that_is_not_what_slurm_takes_is_refused_naming_the_option(kwargs, message):
    with pytest.raises(RemoteError, match=message):
        slurm.batch_script("x", **kwargs)


@pytest.mark.parametrize("good", ["30", "1:30", "04:00:00", "2-00", "2-12:00:00", "gpu,debug", "a100_80g"])
def test_slurm_s_time_formats_and_partition_lists_pass(good):
    if good[0].isdigit():
        assert slurm.check_time(good) == good
    else:
        assert slurm.check_partition(good) == good


@pytest.mark.parametrize("squeue, st, reason, cancelled, alive, expected", [
    ("PENDING", None, None, False, None, "queued"),
    ("RUNNING", "running", None, False, None, "running"),
    ("COMPLETING", "stopped", "stopped", True, None, "running"),  # still saving: not ended yet
    ("CANCELLED", "stopped", "stopped", False, None, "cancelled"),
    (None, "stopped", "stopped", True, None, "cancelled"),  # squeue forgot it; the mark says
    ("COMPLETED", "finished", "completed", False, None, "completed"),
    (None, "finished", "completed", False, None, "completed"),
    ("TIMEOUT", "stopped", "stopped", False, None, "stopped"),
    ("FAILED", "crashed", "error", False, None, "crashed"),
    (None, None, None, False, None, "crashed"),  # forgotten, never wrote its folder
    (None, "running", None, False, True, "running"),  # a plain host's live process
    (None, "running", None, False, False, "crashed"),  # gone without a word (killed)
    (None, "stopped", "stopped", False, False, "stopped"),
])
def test_state_of_a_run(squeue, st, reason, cancelled, alive, expected):
    assert slurm.state_of(squeue, st, reason, cancelled=cancelled, alive=alive) == expected


def test_submit_line_keeps_the_job_id_and_says_when_there_is_no_sbatch(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stub(bin_dir, "sbatch", '[ "$1" = --parsable ] && [ -f "$2" ] && echo "42;cluster"')
    (tmp_path / slurm.SCRIPT_FILE).write_text("#!/bin/sh\n")
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    done = subprocess.run(["sh", "-c", slurm.submit_line()], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert done.stdout.strip() == "42;cluster" and (tmp_path / slurm.JOB_FILE).read_text().strip() == "42;cluster"
    (bin_dir / "sbatch").unlink()
    done = subprocess.run(["/bin/sh", "-c", slurm.submit_line()], cwd=tmp_path, capture_output=True, text=True,
                          env={**env, "PATH": str(bin_dir)})
    assert done.returncode == 127 and "no sbatch on the host" in done.stderr
