#!/usr/bin/env bash
# The programs the remote-run tests (tests/remote) need: an OpenSSH server the tests start on 127.0.0.1,
# rsync (both ends of `workbench remote`), setfacl (lets the test user reach the venv), and a one-node SLURM
# cluster (slurmctld, slurmd, sbatch... from slurm-wlm; munge for its authentication) the SLURM tests start.
# Idempotent; run as root (.ci/run does, before `make test`). Installs only what is missing; exit 0 when all is there.
set -euo pipefail
missing=()
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh >/dev/null 2>&1 || missing+=(openssh-client)
command -v rsync >/dev/null 2>&1 || missing+=(rsync)
command -v setfacl >/dev/null 2>&1 || missing+=(acl)
{ [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && command -v sbatch >/dev/null 2>&1; } || missing+=(slurm-wlm)
[ -x /usr/sbin/munged ] || missing+=(munge)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "tests/hosts/install.sh: missing ${missing[*]}; run this script as root (or install them)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "tests/hosts/install.sh: installed ${missing[*]}"
