#!/usr/bin/env bash
# End-to-end test of convert/README.md's Slurm recipe on a one-node Slurm
# cluster on localhost (Debian's slurm-wlm + munge; installed with apt-get
# when missing and running as root). On a tiny replica it runs:
#   1. the array (N fixed in the script, --exclusive) + the afterany merge;
#   2. the array with one task cancelled: the merge refuses (exit 1), the
#      task is resubmitted alone (--array=I), and the conversion completes;
# and checks both outputs byte-identical to a single-machine conversion.
# Everything (config, state, spool, checkpoints) lives in one temporary
# directory; the daemons it started are stopped at exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="/usr/local/go/bin:$PATH"
N=4
work=$(mktemp -d /tmp/k3ckpt-slurm.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 1
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "slurm test: FAIL: $*" >&2; exit 1; }
t0=$SECONDS
say() { echo "slurm test [$((SECONDS - t0))s]: $*"; }

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  [ "$(id -u)" = 0 ] || fail "slurm-wlm and munge are not installed (apt-get install slurm-wlm munge)"
  say "installing slurm-wlm and munge"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge >/dev/null
fi

# munge: a private key and socket for this test only.
mkdir -p "$work/munge" && chmod 700 "$work/munge"
dd if=/dev/urandom of="$work/munge/key" bs=1024 count=1 status=none
chmod 400 "$work/munge/key"
munged --force --key-file="$work/munge/key" --socket="$work/munge/sock" \
  --pid-file="$work/munge/pid" --log-file="$work/munge/log" --seed-file="$work/munge/seed"
pids+=("$(cat "$work/munge/pid")")

host=$(hostname -s)
mkdir -p "$work/state" "$work/spool" "$work/log"
cat > "$work/slurm.conf" <<CONF
ClusterName=k3test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/munge/sock
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
SlurmctldPort=16817
SlurmdPort=16818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
MaxArraySize=1000
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$work/slurm.conf"
slurmctld -f "$SLURM_CONF" -i
slurmd -f "$SLURM_CONF"
sleep 2
pids+=("$(cat "$work/slurmctld.pid")" "$(cat "$work/slurmd.pid")")
for _ in $(seq 30); do
  sinfo -h -o %T 2>/dev/null | grep -q idle && break
  sleep 1
done
sinfo -h -o %T | grep -q idle || { cat "$work/log/"*.log >&2; fail "the node did not come up"; }
say "cluster up: $(sinfo -h -o '%P %D %T')"

# The binary on "shared storage" (the install step), a replica, a reference.
go build -o "$work/bin/k3ckpt" ./cmd/k3ckpt
k3="$work/bin/k3ckpt"
$k3 synth "$work/src" --scale tiny --seed 7 -q
$k3 convert "$work/src" "$work/ref" -q
say "reference conversion done"

# The README's script, with this test's paths and a node of $(nproc) CPUs.
cat > "$work/convert.sbatch" <<SB
#!/bin/bash
#SBATCH --job-name=k3-fp8 --array=0-$((N - 1)) --nodes=1 --ntasks=1 --exclusive --cpus-per-task=1
#SBATCH --output=$work/log/%A_%a.out
N=$N   # = the number of array indices above; never change it between submissions
exec $k3 convert $work/src "\$DST" --jobs 2 --resume --worker "\${SLURM_ARRAY_TASK_ID}/\${N}" --json
SB

wait_job() { # wait_job JOBID: until no task of it is queued or running
  for _ in $(seq 300); do
    [ -z "$(squeue -h -j "$1" 2>/dev/null)" ] && return 0
    sleep 1
  done
  squeue >&2; fail "job $1 did not finish in 300 s"
}
state_of() { scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | head -1 | cut -d= -f2; }

say "run 1: the array and the afterany merge"
export DST="$work/out1"
jid=$(sbatch --parsable --export=ALL "$work/convert.sbatch")
mid=$(sbatch --parsable --export=ALL --dependency=afterany:$jid --output="$work/log/merge1.out" --wrap "$k3 merge $DST --json")
wait_job "$jid"; wait_job "$mid"
diff -r "$work/ref" "$DST" >/dev/null || fail "run 1 differs from the single-machine conversion"
say "run 1 byte-identical to the single-machine conversion"

say "run 2: task 2 cancelled before it starts, then resubmitted alone"
export DST="$work/out2"
jid=$(sbatch --parsable --export=ALL --hold "$work/convert.sbatch")
scancel "${jid}_2"
scontrol release "$jid"
mid=$(sbatch --parsable --export=ALL --dependency=afterany:$jid --output="$work/log/merge2.out" --wrap "$k3 merge $DST --json")
wait_job "$jid"; wait_job "$mid"
[ -f "$DST/model.safetensors.index.json" ] && fail "run 2 was finalized although task 2 never ran"
grep -q "not done" "$work/log/merge2.out" || { cat "$work/log/merge2.out" >&2; fail "the merge did not report the missing slice"; }
say "merge after the lost task refused: $(head -c 200 "$work/log/merge2.out")"
jid2=$(sbatch --parsable --export=ALL --array=2 "$work/convert.sbatch")
wait_job "$jid2"
[ "$(state_of "${jid2}_2")" = COMPLETED ] || [ "$(state_of "$jid2")" = COMPLETED ] || true
diff -r "$work/ref" "$DST" >/dev/null || { ls -la "$DST" >&2; cat "$work/log/${jid2}_2.out" >&2; fail "run 2 differs from the single-machine conversion"; }
say "run 2: the resubmitted task completed the conversion; byte-identical"
say "ok"
