"""The hosts of the remote-run tests, each started once per session: a real sshd on 127.0.0.1
(tests/hosts/sshd.py) and, for the SLURM tests, a one-node SLURM cluster on 127.0.0.1 (tests/hosts/slurm.py).

These tests run in ``make test`` after the others, in one process of their own (the rest run on two
pytest-xdist workers; two hosts would share one test user). A machine without the server fails them (never skips):
``tests/hosts/install.sh`` installs it, and ``.ci/run`` runs that script as root. The SLURM tests skip only
when this is not root and slurm-wlm / munge are missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.hosts import slurm
from tests.hosts.sshd import SshHost, start_host


def pytest_configure(config):
    config.addinivalue_line("markers", "remote: needs the SSH test host (a real sshd on 127.0.0.1, started once)")


@pytest.fixture(scope="session")
def slurm_folder() -> Path:
    """The test cluster's folder, made first: the test sshd gives the test user ``SLURM_CONF`` inside it."""
    folder = slurm.cluster_folder()
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def ssh_host(tmp_path_factory, slurm_folder) -> SshHost:
    """The running test host (started once per session, stopped by its pid at the end)."""
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        # each worker's host would rewrite the one test user's authorized_keys and end its processes
        pytest.fail("tests/remote share one test user: run them in one process (`make test` runs "
                    "`pytest tests/remote` after the rest)", pytrace=False)
    try:
        host = start_host(tmp_path_factory.mktemp("sshd"), Path(sys.executable).parent,
                          env={"SLURM_CONF": str(slurm_folder / "slurm.conf")})
    except (RuntimeError, OSError) as e:
        pytest.fail(f"SSH test host: {e}", pytrace=False)
    yield host
    host.close()


@pytest.fixture(scope="session")
def slurm_cluster(slurm_folder, ssh_host) -> slurm.SlurmCluster:
    """The running one-node SLURM cluster (started once per session after the ssh host, stopped at the end)."""
    reason = slurm.skip_reason()
    if reason:
        pytest.skip(reason)
    try:
        cluster = slurm.start_cluster(slurm_folder)
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        pytest.fail(f"SLURM test cluster: {e}", pytrace=False)
    yield cluster
    cluster.close()


@pytest.fixture(scope="session")
def remote_dir(ssh_host) -> str:
    """This session's folder of runs in the test user's home (removed at the end)."""
    name = f"wb-tests-{uuid.uuid4().hex[:8]}"
    yield name
    shutil.rmtree(ssh_host.home / name, ignore_errors=True)
