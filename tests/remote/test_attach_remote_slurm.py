"""``RemoteRun.attach()`` to a SLURM job on the one-node test cluster (tests/hosts/slurm.py) through the login node
(the ssh test host): the job's discovery file is found (also from inside its allocation, ``srun --overlap``), the
run is steered through the managed tunnel, and ``cancel`` ends it."""

from __future__ import annotations

import socket

import pytest

from tests.hosts.sshd import ALIAS
from tests.remote.polling import wait_until
from tests.remote.test_attach_remote import attach_when_listening
from workbench import remote
from workbench.core.remote import waiting

pytestmark = [pytest.mark.remote, pytest.mark.slow]


def test_a_slurm_job_is_attached_through_the_login_node(slurm_cluster, ssh_host, remote_dir, tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text("epochs = 10000\ntensorboard = false\n[data]\ndataset = \"digits\"\nbatch_size = 256\n")
    run = remote.submit(toml, ALIAS, slurm=True, name="attach job", remote_dir=remote_dir,
                        ssh_config=ssh_host.config)
    try:
        handle = attach_when_listening(run)
        try:
            assert handle.info["run_dir"].endswith("run") and handle.tunnel.node is None  # the node is this host
            assert handle.wait_ack(handle.set_lr(0.005), timeout=30)["ok"]
        finally:
            handle.close()
        # the same discovery file read from inside the job's allocation, as on a cluster whose nodes have their
        # own /tmp: one srun step on each node of the job, named by the node
        nodes = waiting.read_waiting_on_nodes(run.ssh, ALIAS, run.job)
        assert list(nodes) == [socket.gethostname().split(".")[0]]
        assert waiting.find_run(next(iter(nodes.values())), run.run_dir, run.id)["port"] > 0
    finally:
        assert run.cancel() == "cancelled"
    assert wait_until(lambda: (ssh_host.home / remote_dir / "attach job" / "run" / "last.pt").is_file(),
                      "last.pt saved", 30)
