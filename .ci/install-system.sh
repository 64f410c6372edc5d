#!/usr/bin/env bash
# System packages for the end-to-end tests (a real Slurm 22.05 cluster, the Lua plugin, Prometheus,
# chromium for harp report's page).
# For a fresh Debian 12, as root. Idempotent: re-running only refreshes the apt index.
# The tests start their own private munged/MariaDB/Slurm daemons (tests/e2e/cluster.py), so the
# system services these packages ship are not started here.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
    echo "install-system.sh: run as root" >&2
    exit 1
fi

packages=(
    slurmctld slurmd slurmdbd slurm-client munge mariadb-server
    lua5.1 lua-socket lua-http lua-cqueues lua-cjson lua-posix lua-check
    prometheus
    chromium
    python3-venv python3-dev
    systemd
)

# slurm-wlm-emulator replaces the real slurmd/slurmctld binaries with simulator builds.
if dpkg-query -W -f='${Status}' slurm-wlm-emulator 2>/dev/null | grep -q 'install ok installed'; then
    echo "install-system.sh: slurm-wlm-emulator is installed; remove it (apt-get purge slurm-wlm-emulator)" >&2
    exit 1
fi

# Keep package scripts from starting services during the install (no port 3306/9090 squatting, no
# slurmctld failing for want of a config). Only our own temporary policy file is removed afterwards.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 0755 "$policy"
    own_policy=1
fi
cleanup() {
    if [ "$own_policy" -eq 1 ]; then
        rm -f "$policy"
    fi
}
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
apt-get update
# With recommends, as proven on this machine kind (a leaner set was never tested from scratch).
apt-get install -y "${packages[@]}"

# Fail here, not in the middle of the tests, if something did not land.
for prog in slurmctld slurmd slurmdbd sacctmgr sacct sbatch scontrol sinfo munged mariadbd mariadb-install-db lua5.1 luacheck prometheus chromium systemd-analyze; do
    if ! PATH="$PATH:/usr/sbin:/sbin" command -v "$prog" >/dev/null; then
        echo "install-system.sh: $prog not found after install" >&2
        exit 1
    fi
done
for module in socket.unix http.hpack posix.time posix.poll cqueues cjson; do
    if ! lua5.1 -e "require('$module')" 2>/dev/null; then
        echo "install-system.sh: Lua 5.1 module '$module' does not load" >&2
        exit 1
    fi
done
echo "install-system.sh: system packages ready"
