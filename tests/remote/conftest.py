"""The SSH test host of the remote-run tests: one real sshd on 127.0.0.1 for the whole session (tests/hosts/sshd.py).

These tests run in ``make test`` like the others. A machine without the server fails them (never skips):
``tests/hosts/install.sh`` installs it, and ``.ci/run`` runs that script as root.
"""

from __future__ import annotations

import shutil
import sys
import uuid
from pathlib import Path

import pytest

from tests.hosts.sshd import SshHost, start_host


def pytest_configure(config):
    config.addinivalue_line("markers", "remote: needs the SSH test host (a real sshd on 127.0.0.1, started once)")


@pytest.fixture(scope="session")
def ssh_host(tmp_path_factory) -> SshHost:
    """The running test host (started once per session, stopped by its pid at the end)."""
    try:
        host = start_host(tmp_path_factory.mktemp("sshd"), Path(sys.executable).parent)
    except (RuntimeError, OSError) as e:
        pytest.fail(f"SSH test host: {e}", pytrace=False)
    yield host
    host.close()


@pytest.fixture(scope="session")
def remote_dir(ssh_host) -> str:
    """This session's folder of runs in the test user's home (removed at the end)."""
    name = f"wb-tests-{uuid.uuid4().hex[:8]}"
    yield name
    shutil.rmtree(ssh_host.home / name, ignore_errors=True)
