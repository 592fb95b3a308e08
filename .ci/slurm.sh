#!/usr/bin/env bash
# A one-node SLURM for tests/ablate/test_slurm.py: munge, slurmctld and slurmd on this machine, as
# root, without systemd or cgroups. Idempotent: a second call finds the node up and returns.
# Debian's slurm-wlm (22.05) and munge. Exits non-zero with one line saying what failed.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
  echo "slurm.sh: must run as root (it installs packages and starts munged, slurmctld and slurmd)" >&2
  exit 1
fi
conf=/etc/slurm/slurm.conf
marker="# one-node test cluster written by .ci/slurm.sh"

if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi

if sinfo -h -o %T 2>/dev/null | grep -qx idle; then
  exit 0
fi

# munge: the key (Debian's postinst makes one; a bare image may not), then the daemon.
if [ ! -s /etc/munge/munge.key ]; then
  mungekey --create --keyfile=/etc/munge/munge.key
fi
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  runuser -u munge -- munged
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  munge -n | unmunge >/dev/null || { echo "slurm.sh: munged did not start (see /var/log/munge/munged.log)" >&2; exit 1; }
fi

node=$(hostname -s)
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
if [ -e "$conf" ] && ! grep -qF "$marker" "$conf"; then
  echo "slurm.sh: $conf exists and is not ours; refusing to overwrite it" >&2
  exit 1
fi
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
cat > "$conf" <<CONF
$marker
ClusterName=ablate-ci
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
MpiDefault=none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
NodeName=$node CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF

pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd
for _ in $(seq 100); do
  state=$(sinfo -h -o %T 2>/dev/null | head -1 || true)
  [ "$state" = idle ] && exit 0
  sleep 0.2
done
echo "slurm.sh: node $node not idle after 20 s (sinfo: ${state:-no answer}); see /var/log/slurm/slurmctld.log and slurmd.log" >&2
exit 1
