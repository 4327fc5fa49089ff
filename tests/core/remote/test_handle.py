"""``workbench.remote.submit``'s refusals come before anything is copied or any host is reached (the host here does
not exist: reaching it would be a different error). Real submits are in tests/remote."""

from __future__ import annotations

import pytest

from workbench import remote
from workbench.core.errors import TrustRequired
from workbench.core.remote.handle import RemoteRun


def _run_toml(tmp_path, extra=""):
    path = tmp_path / "run.toml"
    path.write_text(f"epochs = 1\n{extra}[data]\ndataset = \"digits\"\n")
    return path


@pytest.mark.parametrize("kwargs, message", [
    ({"nodes": 2}, "add --slurm"), ({"partition": "gpu"}, "add --slurm"), ({"time": "1:00:00"}, "add --slurm"),
    ({"slurm": True, "partition": "x;y"}, "--partition"), ({"slurm": True, "time": "soon"}, "--time"),
    ({"slurm": True, "nodes": 0}, "--nodes")])
def test_bad_job_options_are_refused_before_the_host_is_reached(tmp_path, kwargs, message):
    with pytest.raises(remote.RemoteError, match=message):
        remote.submit(_run_toml(tmp_path), "no-such-host.invalid", **kwargs)


def test_a_run_file_naming_code_needs_trust_before_anything_is_copied(tmp_path):
    (tmp_path / "net.py").write_text("import torch\ndef make():\n    return torch.nn.Linear(64, 10)\n")
    run = _run_toml(tmp_path, '[model]\narch = "net.py:make"\n')
    with pytest.raises(TrustRequired):
        remote.submit(run, "no-such-host.invalid", slurm=True)


def test_a_remote_run_is_named_by_its_folder():
    r = RemoteRun("it's; x", "gpu-box", "/home/me/workbench-runs/it's; x/run", "/home/me/workbench-runs/it's; x", "12")
    assert (r.id, r.host, r.job) == ("it's; x", "gpu-box", "12") and r.run_dir.endswith("/run")
    assert remote.STATES == ("queued", "running", "completed", "stopped", "crashed", "cancelled")
