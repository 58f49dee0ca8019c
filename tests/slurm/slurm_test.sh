#!/usr/bin/env bash
# slurm_test.sh: strata under a real, single-node Slurm. Installs Debian's slurm-wlm and munge
# if missing, writes a minimal slurm.conf in a temporary directory, starts munged, slurmctld
# and slurmd on this machine (foreground, as root, no cgroups), submits the ctr job with
# scripts/slurm/strata.sbatch as 4 tasks (scheduler, 1 server, 2 trainers), waits, and checks
# the job's exit status and trainer 0's AUC. Every daemon it started is stopped on exit.
# Exits 77 (CTest SKIP_RETURN_CODE) with the reason when Slurm cannot run here.
#   tests/slurm/slurm_test.sh SOURCE_DIR BIN_DIR
set -uo pipefail
src="${1:?source dir}"
bin="${2:?bin dir}"
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

# --- packages ---
sudo_=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo > /dev/null && sudo -n true 2> /dev/null || skip "not root and no passwordless sudo: cannot start Slurm daemons"
  sudo_="sudo -n"
fi
if ! command -v slurmctld > /dev/null || ! command -v slurmd > /dev/null || ! command -v munged > /dev/null; then
  echo "installing slurm-wlm and munge (apt-get)"
  $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    slurm-wlm munge > /tmp/strata-slurm-apt.log 2>&1 ||
    { $sudo_ apt-get update -q > /dev/null 2>&1 &&
      $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        slurm-wlm munge > /tmp/strata-slurm-apt.log 2>&1; } ||
    skip "apt-get install slurm-wlm munge failed: $(tail -1 /tmp/strata-slurm-apt.log)"
fi
[ -x "$bin/strata-task" ] || fail "no $bin/strata-task (build first)"

# --- a private Slurm in a temporary directory ---
dir="$(mktemp -d /tmp/strata-slurm.XXXXXX)"
chmod 700 "$dir"
pids=()
cleanup() {
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill -TERM "${pids[$i]}" 2> /dev/null
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2> /dev/null
    wait "$pid" 2> /dev/null
  done
  [ -n "${KEEP_SLURM_DIR:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ctld_port="$(free_port)"
slurmd_port="$(free_port)"
strata_port="$(free_port)"
host="$(hostname -s)"
cpus="$(nproc)"
show_logs() { for f in "$dir"/munged.log "$dir"/slurmctld.log "$dir"/slurmd.log; do [ -f "$f" ] && { echo "--- $f"; tail -15 "$f"; }; done; }

dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge.key"
munged -F --force --key-file="$dir/munge.key" --socket="$dir/munge.socket" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" &
pids+=($!)
for _ in $(seq 50); do [ -S "$dir/munge.socket" ] && break; sleep 0.1; done
[ -S "$dir/munge.socket" ] || { show_logs; skip "munged did not start (no socket $dir/munge.socket)"; }

mkdir -p "$dir/state" "$dir/spool"
cat > "$dir/slurm.conf" << EOF
ClusterName=stratatest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$dir/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdTimeout=60
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -D -i -f "$SLURM_CONF" > "$dir/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N "$host" > "$dir/slurmd.out" 2>&1 &
pids+=($!)

state=""
for _ in $(seq 100); do
  state="$(sinfo -h -o %T 2> /dev/null | head -1)"
  [ "$state" = idle ] && break
  for pid in "${pids[@]}"; do
    kill -0 "$pid" 2> /dev/null || { show_logs; cat "$dir"/*.out; skip "a Slurm daemon (pid $pid) exited at start"; }
  done
  sleep 0.3
done
[ "$state" = idle ] || { show_logs; skip "the node did not become idle in 30 s (state: '${state:-none}')"; }
echo "slurm up: slurmctld :$ctld_port, slurmd :$slurmd_port, node $host ($cpus CPUs) idle"

# --- the job: 4 tasks, one srun ---
steps="${STRATA_SLURM_STEPS:-300}"
start=$(date +%s)
cd "$dir"
# sbatch --wait polls with a growing back-off (half a minute late here), so poll ourselves.
job_id="$(sbatch --parsable -O -n 4 -D "$dir" -o "$dir/job.out" \
  --export=ALL,STRATA_BIN="$bin",STRATA_SCHEDULER_PORT="$strata_port",STRATA_SERVERS=1 \
  "$src/scripts/slurm/strata.sbatch" "$src/examples/ctr.yaml" \
  --set sync.mode=hybrid --set server.store.path="$dir/store" --set 'train.metrics_path=""' \
  --set train.steps="$steps" --set train.log_every=100)" || { show_logs; fail "sbatch refused the job"; }
job_state=""
for _ in $(seq 300); do
  job_state="$(scontrol show job "$job_id" 2> /dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)"
  case "$job_state" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE) break ;; esac
  sleep 0.5
done
exit_code="$(scontrol show job "$job_id" 2> /dev/null | grep -o ' ExitCode=[0-9:]*' | cut -d= -f2)"
echo "job $job_id: JobState=${job_state:-?} ExitCode=${exit_code:-?} after $(($(date +%s) - start)) s; its output:"
cat "$dir/job.out" 2> /dev/null
[ "$job_state" = COMPLETED ] && [ "$exit_code" = "0:0" ] || { show_logs; fail "the job ended ${job_state:-unfinished after 150 s} with exit code ${exit_code:-?}"; }
auc="$(grep -o 'auc [0-9.]*' "$dir/job.out" | head -1 | cut -d' ' -f2)"
[ -n "$auc" ] || fail "no AUC in the job's output"
grep -q "task 0 (SLURM_PROCID) is scheduler" "$dir/job.out" || fail "task 0 did not become the scheduler"
grep -q "is server 0" "$dir/job.out" || fail "no server 0"
grep -q "is trainer 1" "$dir/job.out" || fail "no trainer 1"
python3 -c "import sys; sys.exit(0 if float('$auc') >= 0.70 else 1)" || fail "AUC $auc below 0.70"
echo "PASS: 4 Slurm tasks (scheduler, 1 server, 2 trainers), exit 0, auc $auc"
