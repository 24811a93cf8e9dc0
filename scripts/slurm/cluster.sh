#!/usr/bin/env bash
# A real Slurm cluster on this machine, for the test suite (Debian/Ubuntu, run as root): one node,
# or N emulated nodes (one slurmd each, own port/spool/pid file, names resolving to 127.0.0.1).
#
#   scripts/slurm/cluster.sh start [--nodes N]
#                                      install packages if missing, (re)create the state dir, start
#                                      the daemons, wait until every node is idle.  Exit 0 = ready.
#                                      N = 1 (default): one node named after this host; N > 1:
#                                      nodes exp-node1..exp-nodeN.  Already running and healthy
#                                      with the same nodes -> reused (nothing wiped), exit 0.
#   scripts/slurm/cluster.sh stop      cancel all jobs, stop the daemons this script started, exit 0.
#   scripts/slurm/cluster.sh restart   stop + start (fresh state: job ids restart at 1).
#   scripts/slurm/cluster.sh status    print "running ..." and exit 0, or "stopped" and exit 1.
#   scripts/slurm/cluster.sh env       print `export SLURM_CONF=...` for clients (eval "$(... env)").
#
# start prints ONE line on stdout (progress goes to stderr):
#   "SLURM-READY: partition=... cpus=... ..."   exit 0: the cluster is up, the node idle.
#   "SLURM-UNAVAILABLE: <reason>"               exit 3: this machine cannot host Slurm (not root,
#                                               no apt-get, the packages cannot be installed).
#                                               The test suite skips (fails under CI=true).
#   "SLURM-FAILED: <reason>"                    exit 4: Slurm is installed but did not come up
#                                               (a daemon not starting, the node not idle, a port
#                                               in use, ...); the last lines of the daemons' logs
#                                               follow on stderr and whatever was started is
#                                               stopped.  The test suite fails.
# Exit codes: 0 ok, 1 status: not running, 2 usage, 3 Slurm unavailable here, 4 start failed.
#
# Environment:
#   SLURM_TEST_DIR            state dir (config, logs, spool, database), wiped on start
#                             [/tmp/experiments-slurm]
#   SLURM_TEST_ACCOUNTING     auto|1|0 [auto]: MariaDB + slurmdbd so that sacct works (submitit
#                             needs it to notice cancelled/killed jobs).  auto = try, fall back to
#                             no accounting with a warning; 1 = required; 0 = skip (~15 s faster).
#   SLURM_TEST_CPUS           CPUs the node advertises [max(8, nproc)] (config_overrides allows
#                             more than the real cores)
#   SLURM_TEST_MEM_MB         RealMemory of the node [80% of MemTotal, at least 16384].  Memory is not a
#                             consumable resource here (CR_Core) nor enforced; it only bounds --mem
#                             (mem_gb) at submission ("Memory specification can not be satisfied").
#   SLURM_TEST_PARTITION      name of the single, default partition [debug]
#   SLURM_TEST_KILL_WAIT      KillWait: seconds between SIGTERM and SIGKILL on cancel/timeout/requeue
#                             [10; Slurm's default is 30].  submitit ignores SIGTERM, so a cancelled or
#                             requeued submitit job keeps running (and holds its CPUs) this long.
#   SLURM_TEST_REQUEUE_DELAY  AuthInfo cred_expire: a requeued job stays PENDING (Reason=BeginTime) this
#                             many seconds (+1) before it may start again [20; Slurm's default is 120].
#                             (`scontrol update JobId=<id> StartTime=now` skips the wait.)
#   SLURM_TEST_MAX_ARRAY_SIZE MaxArraySize: a job array's task indices stay below it [1001, Slurm's
#                             default]; the test suite starts the cluster with 2, so that a 3-point
#                             sweep is split into two arrays as a large one is on a real cluster
#   SLURM_TEST_START_TIMEOUT  seconds to wait for the daemons / idle node [60]
#   SLURM_TEST_PORT_BASE      slurmctld port; slurmdbd = +2, mariadb = +3, node i's slurmd = +10+i
#                             [6817]
#
# Clients (sbatch, squeue, sacct, submitit, and the jobs they submit) must be given
# SLURM_CONF=$SLURM_TEST_DIR/etc/slurm.conf (see `env`): /etc/slurm/slurm.conf is never written, so a
# machine that already has one (a login node of a real cluster) keeps talking to its own cluster.
set -uo pipefail

STATE=${SLURM_TEST_DIR:-/tmp/experiments-slurm}
ACCOUNTING=${SLURM_TEST_ACCOUNTING:-auto}
START_TIMEOUT=${SLURM_TEST_START_TIMEOUT:-60}
PARTITION=${SLURM_TEST_PARTITION:-debug}
KILL_WAIT=${SLURM_TEST_KILL_WAIT:-10}
REQUEUE_DELAY=${SLURM_TEST_REQUEUE_DELAY:-20}
MAX_ARRAY_SIZE=${SLURM_TEST_MAX_ARRAY_SIZE:-1001}
PORT=${SLURM_TEST_PORT_BASE:-6817}
CTLD_PORT=$PORT DBD_PORT=$((PORT + 2)) DB_PORT=$((PORT + 3))
MARKER="# experiments-slurm-test-cluster (written by scripts/slurm/cluster.sh)"
CONF=$STATE/etc/slurm.conf
ETC_CONF=/etc/slurm/slurm.conf  # written by earlier versions of this script: removed when ours
NODES_FILE=$STATE/nodes           # the node names of the running cluster, one per line
# Every daemon is started with this variable in its environment, so that `stop` can also find
# processes it started whose PID file is gone (e.g. state dir deleted) and the slurmstepds they left.
TAG_VAR=EXPERIMENTS_SLURM_TEST_CLUSTER
BASE_PKGS=(munge slurmctld slurmd slurm-client)
ACCT_PKGS=(mariadb-server slurmdbd)

T_SCRIPT=$(date +%s.%N)
log() { echo "cluster.sh: [$(elapsed "$T_SCRIPT")s] $*" >&2; }
# Only for "this machine cannot host Slurm"; anything that goes wrong later is failed().
unavailable() {
  [ "${STARTED_ANY:-0}" = 1 ] && stop_daemons >/dev/null 2>&1
  echo "SLURM-UNAVAILABLE: $*"
  exit 3
}
failed() {
  log "start failed: $*"
  dump_logs
  [ "${STARTED_ANY:-0}" = 1 ] && stop_daemons >/dev/null 2>&1
  echo "SLURM-FAILED: $*"
  exit 4
}
usage_error() { echo "cluster.sh: $*" >&2; exit 2; }
# The last lines of every log of this start (daemons, apt, mariadb), on stderr.
dump_logs() {
  local f
  for f in "$STATE"/log/*; do
    [ -s "$f" ] || continue
    echo "----- $f (last 15 lines) -----" >&2
    tail -n 15 "$f" | tr -d '\r' >&2
  done
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

pid_of() { local f=$STATE/run/$1.pid; [ -s "$f" ] && cat "$f"; }
# A zombie (exited, not yet reaped by init) counts as dead.
alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
# PIDs of processes carrying our tag (daemons and the slurmstepds/jobs they spawned).
tagged_pids() {
  local p
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" = "$$" ] && continue
    tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qxF "$TAG_VAR=$STATE" && echo "${p#/proc/}"
  done
}
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Kill PIDs with SIGTERM, wait up to $2 seconds, then SIGKILL and wait for them to be gone.
kill_wait() {
  local pids=$1 deadline=$(($(date +%s) + $2)) p left
  [ -n "$pids" ] || return 0
  kill -TERM $pids 2>/dev/null
  while :; do
    left=""
    for p in $pids; do alive "$p" && left="$left $p"; done
    [ -z "$left" ] && return 0
    [ "$(date +%s)" -ge "$deadline" ] && break
    sleep 0.2
  done
  kill -KILL $left 2>/dev/null
  for _ in $(seq 50); do
    left=""; for p in $pids; do alive "$p" && left="$left $p"; done
    [ -z "$left" ] && return 0; sleep 0.1
  done
  log "warning: processes still alive after SIGKILL:$left"
}

stop_daemons() {
  local d p
  # Cancel jobs first, so no slurmstepd / job processes are left behind.
  if alive "$(pid_of slurmctld)" && command -v scancel >/dev/null; then
    local jobs; jobs=$(SLURM_CONF=$CONF timeout 5 squeue -h -o %i 2>/dev/null | tr '\n' ' ')
    [ -n "${jobs// /}" ] && SLURM_CONF=$CONF timeout 5 scancel --quiet $jobs 2>/dev/null
    for _ in $(seq 50); do
      [ -z "$(SLURM_CONF=$CONF timeout 5 squeue -h -t R,CG,S -o %i 2>/dev/null)" ] && break
      sleep 0.2
    done
  fi
  # All at once: ~3 s; one after the other takes ~2 s per daemon.
  local pids=""
  for d in $(node_daemons) slurmctld slurmdbd mariadbd munged; do p=$(pid_of "$d"); alive "$p" && pids="$pids $p"; done
  kill_wait "$pids" 15
  rm -f "$STATE"/run/{slurmd*,slurmctld,slurmdbd,mariadbd,munged}.pid
  # Anything else we started (slurmstepd of a job that would not die, daemons whose PID file
  # was lost): found by the tag in their environment.
  p=$(tagged_pids | tr '\n' ' ')
  [ -n "${p// /}" ] && { log "stopping leftover processes: $p"; kill_wait "$p" 5; }
  return 0
}

# One slurmd per node: its PID file is run/slurmd-<node>.pid.
node_names() { cat "$NODES_FILE" 2>/dev/null; }
node_daemons() { local n; for n in $(node_names); do echo "slurmd-$n"; done; }

is_running() {
  local d
  [ -s "$NODES_FILE" ] || return 1
  alive "$(pid_of munged)" && alive "$(pid_of slurmctld)" || return 1
  for d in $(node_daemons); do alive "$(pid_of "$d")" || return 1; done
  SLURM_CONF=$CONF timeout 5 scontrol ping 2>/dev/null | grep -q UP
}

status_line() {
  local node_state
  node_state=$(SLURM_CONF=$CONF timeout 5 sinfo -h -o %T 2>/dev/null | head -1)
  local acct=no
  alive "$(pid_of slurmdbd)" && acct=yes
  echo "partition=$(cat "$STATE/partition" 2>/dev/null) nodes=$(node_names | paste -sd, -)" \
    "state=${node_state:-unknown} cpus=$(cat "$STATE/cpus" 2>/dev/null)" \
    "mem_mb=$(cat "$STATE/mem_mb" 2>/dev/null) accounting=$acct SLURM_CONF=$CONF dir=$STATE"
}

# Start "$@" in the background, detached from our stdin/stdout/stderr (so a caller capturing our
# output does not wait for the daemons), tagged, with its own session; record its PID.
spawn() {
  local name=$1; shift
  env "$TAG_VAR=$STATE" SLURM_CONF="$CONF" setsid "$@" </dev/null >>"$STATE/log/$name.out" 2>&1 &
  echo $! >"$STATE/run/$name.pid"
  STARTED_ANY=1
}

# wait_for <seconds> <daemon> <what> <command...>: poll until the command succeeds; give up at
# the deadline or as soon as the daemon (whose PID we recorded) has exited.
wait_for() {
  local secs=$1 daemon=$2 what=$3; shift 3
  local deadline=$(($(date +%s) + secs))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -ge "$deadline" ] && return 1
    alive "$(pid_of "$daemon")" || { log "$daemon exited"; return 1; }
    sleep 0.2
  done
  log "$what ready"
}

# Last error line a daemon logged (for the SLURM-UNAVAILABLE reason).
last_error() {
  cat "$STATE/log/$1.log" "$STATE/log/$1.out" 2>/dev/null | grep -iE 'fatal|error' | grep -v pmix | tail -n 1 | tr -d '\r'
}

have_cmds() { local c; for c in "$@"; do command -v "$c" >/dev/null || return 1; done; }

apt_install() {
  command -v apt-get >/dev/null || return 1
  local created_policy=0 rc
  # Keep the packages' init scripts from starting system-wide daemons during installation.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && created_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  if [ "${APT_UPDATED:-0}" != 1 ]; then
    apt-get update -qq -o DPkg::Lock::Timeout=120 >"$STATE/log/apt-update.log" 2>&1 && APT_UPDATED=1
  fi
  apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=120 "$@" \
    >>"$STATE/log/apt-install.log" 2>&1
  rc=$?
  [ "$created_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  return $rc
}

# The last error apt-get logged (for the SLURM-UNAVAILABLE reason).
apt_error() {
  cat "$STATE/log/apt-update.log" "$STATE/log/apt-install.log" 2>/dev/null \
    | grep -E '^(E|W):|rror' | tail -n 1 | tr -d '\r'
}

# node i listens on CTLD_PORT + 10 + i; all run on this host (NodeHostname) at 127.0.0.1.
node_lines() {
  local i=0 n
  for n in "${NODES[@]}"; do
    i=$((i + 1))
    echo "NodeName=$n NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$((CTLD_PORT + 10 + i)) CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN"
  done
}

write_slurm_conf() {  # $1 = yes|no (accounting)
  local acct=""
  [ "$1" = yes ] && acct="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
# for the slurmdbd connection Slurm uses this (not AuthInfo) as the munge socket
AccountingStoragePass=$STATE/munge/munge.socket.2
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30"
  cat >"$CONF" <<EOF
$MARKER
# state dir: $STATE
ClusterName=experiments
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$STATE/munge/munge.socket.2,cred_expire=$REQUEUE_DELAY
SlurmctldPort=$CTLD_PORT
StateSaveLocation=$STATE/spool/ctld
# one slurmd per node on this host (%n = the node's name)
SlurmdSpoolDir=$STATE/spool/d/%n
SlurmctldPidFile=$STATE/run/slurmctld.daemon.pid
SlurmdPidFile=$STATE/run/slurmd-%n.daemon.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
EnforcePartLimits=ALL
ReturnToService=2
MailProg=/bin/true
KillWait=$KILL_WAIT
# pending jobs (e.g. requeued ones once their BeginTime passes) are looked at every 5 s, not 60 s
SchedulerParameters=sched_interval=5,bf_interval=5
MinJobAge=300
MaxArraySize=$MAX_ARRAY_SIZE
InactiveLimit=0
$acct
$(node_lines)
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

start_accounting() {
  local db=$STATE/db
  mkdir -p "$db"
  mariadb-install-db --no-defaults --datadir="$db/data" --user=root --skip-test-db \
    --auth-root-authentication-method=socket --innodb-log-file-size=16M \
    >"$STATE/log/mariadb-install.log" 2>&1 || { log "mariadb-install-db failed (see $STATE/log/mariadb-install.log)"; return 1; }
  spawn mariadbd mariadbd --no-defaults --user=root --datadir="$db/data" --socket="$db/mysqld.sock" \
    --pid-file="$db/mysqld.pid" --port="$DB_PORT" --bind-address=127.0.0.1 --skip-log-bin \
    --log-error="$STATE/log/mariadbd.log" --innodb-buffer-pool-size=64M --innodb-log-file-size=16M \
    --innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 --skip-name-resolve
  wait_for "$START_TIMEOUT" mariadbd mariadbd mariadb-admin --no-defaults --socket="$db/mysqld.sock" -uroot ping \
    || { log "mariadbd did not come up: $(last_error mariadbd)"; return 1; }
  mariadb --no-defaults --socket="$db/mysqld.sock" -uroot -e "
    CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" >>"$STATE/log/mariadbd.log" 2>&1 \
    || { log "creating the slurm database user failed"; return 1; }
  cat >"$STATE/etc/slurmdbd.conf" <<EOF
$MARKER
AuthType=auth/munge
AuthInfo=socket=$STATE/munge/munge.socket.2
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$STATE/log/slurmdbd.log
PidFile=$STATE/run/slurmdbd.daemon.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$STATE/etc/slurmdbd.conf"
  # slurmdbd reads slurmdbd.conf from the directory of SLURM_CONF.
  spawn slurmdbd slurmdbd -D
  wait_for "$START_TIMEOUT" slurmdbd slurmdbd port_busy "$DBD_PORT" \
    || { log "slurmdbd did not come up: $(last_error slurmdbd)"; return 1; }
}

# The node names for N nodes: this host's name for one node, exp-node1..N for several.
plan_nodes() {
  HOST=$(hostname -s 2>/dev/null || hostname)
  [ -n "$HOST" ] || failed "empty hostname"
  NODES=()
  if [ "$NODE_COUNT" = 1 ]; then
    NODES=("$HOST")
  else
    local i; for i in $(seq "$NODE_COUNT"); do NODES+=("exp-node$i"); done
  fi
}

# Earlier versions of this script wrote /etc/slurm/slurm.conf: remove it if it is ours.
remove_our_etc_conf() {
  [ -f "$ETC_CONF" ] && grep -qxF "$MARKER" "$ETC_CONF" && rm -f "$ETC_CONF"
  return 0
}

cmd_start() {
  local t0 t_inst acct=no
  t0=$(now)
  [ "$(id -u)" = 0 ] || unavailable "must run as root (uid $(id -u))"
  case $ACCOUNTING in auto|1|0) ;; *) usage_error "SLURM_TEST_ACCOUNTING must be auto, 1 or 0, not '$ACCOUNTING'";; esac
  plan_nodes
  if is_running && [ "$(node_names | paste -sd' ' -)" = "${NODES[*]}" ]; then
    log "already running, reusing it (use 'restart' for a fresh cluster)"
    echo "SLURM-READY: $(status_line)"
    return 0
  fi
  # Only ever wipe a directory this script created (or an empty/missing one).
  case $STATE in /?*) ;; *) usage_error "SLURM_TEST_DIR must be an absolute path, not '$STATE'";; esac
  if [ -d "$STATE" ] && [ ! -e "$STATE/.experiments-slurm-test" ] && [ -n "$(ls -A "$STATE" 2>/dev/null)" ]; then
    failed "refusing to wipe $STATE: not empty and not created by this script (set SLURM_TEST_DIR)"
  fi
  stop_daemons  # whatever is left of an earlier start
  rm -rf "$STATE"
  mkdir -p "$STATE"/{etc,log,run,munge,spool/ctld,spool/d} || failed "cannot create $STATE"
  touch "$STATE/.experiments-slurm-test"
  chmod 755 "$STATE" "$STATE/munge"  # munged: socket dir must be o+x, not o+w

  # Packages.
  t_inst=$(now)
  if ! have_cmds munged slurmctld slurmd sinfo sbatch; then
    command -v apt-get >/dev/null || unavailable "Slurm is not installed and there is no apt-get to install ${BASE_PKGS[*]}"
    log "installing ${BASE_PKGS[*]}"
    apt_install "${BASE_PKGS[@]}" || unavailable "installing ${BASE_PKGS[*]} failed (apt-get: $(apt_error))"
  fi
  if [ "$ACCOUNTING" != 0 ] && ! have_cmds mariadbd mariadb-install-db slurmdbd sacct; then
    log "installing ${ACCT_PKGS[*]}"
    if ! apt_install "${ACCT_PKGS[@]}"; then
      [ "$ACCOUNTING" = 1 ] && unavailable "installing ${ACCT_PKGS[*]} failed (SLURM_TEST_ACCOUNTING=1; apt-get: $(apt_error))"
      log "warning: installing ${ACCT_PKGS[*]} failed; continuing without accounting"
      ACCOUNTING=0
    fi
  fi
  log "packages ready in $(elapsed "$t_inst") s"

  # Nodes: every name must resolve (torch's MASTER_ADDR is the first node of a job).
  local n
  for n in "$HOST" "${NODES[@]}"; do
    getent hosts "$n" >/dev/null && continue
    log "adding '127.0.0.1 $n' to /etc/hosts"
    echo "127.0.0.1 $n" >>/etc/hosts || failed "node name '$n' does not resolve and /etc/hosts is not writable"
  done
  local nproc_; nproc_=$(nproc)
  CPUS=${SLURM_TEST_CPUS:-$((nproc_ > 8 ? nproc_ : 8))}
  MEM_MB=${SLURM_TEST_MEM_MB:-$(awk '/^MemTotal:/ { m = $2 / 1024 * 0.8; if (m < 16384) m = 16384; printf "%d", m }' /proc/meminfo)}
  echo "$CPUS" >"$STATE/cpus"; echo "$MEM_MB" >"$STATE/mem_mb"
  echo "$PARTITION" >"$STATE/partition"

  local p
  local i
  for i in $(seq 0 "$NODE_COUNT"); do
    p=$((CTLD_PORT + (i > 0 ? 10 + i : 0)))
    port_busy "$p" && failed "port $p on 127.0.0.1 is already in use (another Slurm? set SLURM_TEST_PORT_BASE)"
  done
  if [ "$ACCOUNTING" != 0 ]; then
    for p in "$DBD_PORT" "$DB_PORT"; do
      port_busy "$p" || continue
      [ "$ACCOUNTING" = 1 ] && failed "port $p on 127.0.0.1 is already in use (another slurmdbd/MariaDB? set SLURM_TEST_PORT_BASE)"
      log "warning: port $p is already in use; continuing without accounting"
      ACCOUNTING=0
    done
  fi

  # munge, with its own key and socket in the state dir.
  if [ -r /etc/munge/munge.key ]; then
    cp /etc/munge/munge.key "$STATE/munge/munge.key"
  else
    dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none
  fi
  chown root:root "$STATE/munge/munge.key"; chmod 600 "$STATE/munge/munge.key"
  spawn munged munged -F --force --socket="$STATE/munge/munge.socket.2" --key-file="$STATE/munge/munge.key" \
    --pid-file="$STATE/run/munged.daemon.pid" --log-file="$STATE/log/munged.log" --seed-file="$STATE/munge/munged.seed"
  wait_for 10 munged munged test -S "$STATE/munge/munge.socket.2" \
    || failed "munged did not start: $(last_error munged)"

  if [ "$ACCOUNTING" != 0 ]; then
    if start_accounting; then
      acct=yes
    else
      [ "$ACCOUNTING" = 1 ] && failed "accounting (MariaDB + slurmdbd) did not start; see $STATE/log/"
      log "warning: accounting did not start; continuing without it (sacct will not work)"
      for p in slurmdbd mariadbd; do alive "$(pid_of $p)" && kill_wait "$(pid_of $p)" 10; rm -f "$STATE/run/$p.pid"; done
    fi
  fi

  write_slurm_conf "$acct"
  remove_our_etc_conf

  spawn slurmctld slurmctld -D -i
  wait_for "$START_TIMEOUT" slurmctld slurmctld sh -c "SLURM_CONF='$CONF' scontrol ping | grep -q UP" \
    || failed "slurmctld did not start: $(last_error slurmctld)"
  printf '%s\n' "${NODES[@]}" >"$NODES_FILE"
  for n in "${NODES[@]}"; do
    mkdir -p "$STATE/spool/d/$n"
    spawn "slurmd-$n" slurmd -D -N "$n"
  done
  for n in "${NODES[@]}"; do
    wait_for "$START_TIMEOUT" "slurmd-$n" "node $n idle" sh -c "SLURM_CONF='$CONF' sinfo -h -n '$n' -o %T | grep -qx idle" \
      || failed "node $n not idle after ${START_TIMEOUT}s: $(SLURM_CONF=$CONF sinfo -h -n "$n" -o '%T %E' 2>&1 | head -1); $(last_error "slurmd-$n")"
  done
  log "started in $(elapsed "$t0") s"
  echo "SLURM-READY: $(status_line)"
}

cmd_stop() {
  local t0; t0=$(now)
  stop_daemons
  remove_our_etc_conf
  log "stopped in $(elapsed "$t0") s"
}

cmd_status() {
  if is_running; then
    echo "running $(status_line)"
  else
    local left; left=$(tagged_pids | tr '\n' ' ')
    echo "stopped${left:+ (leftover processes: $left)}"
    return 1
  fi
}

COMMAND=${1:-}
shift || true
NODE_COUNT=1
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) NODE_COUNT=${2:-}; shift 2 || usage_error "--nodes needs a number" ;;
    --nodes=*) NODE_COUNT=${1#--nodes=}; shift ;;
    *) usage_error "unknown argument '$1' (usage: $0 start|restart [--nodes N] | stop | status | env)" ;;
  esac
done
case $NODE_COUNT in ''|*[!0-9]*|0) usage_error "--nodes must be a whole number >= 1, not '$NODE_COUNT'" ;; esac

case $COMMAND in
  start) cmd_start ;;
  stop) cmd_stop ;;
  restart) cmd_stop; cmd_start ;;
  status) cmd_status ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) echo "usage: $0 start|restart [--nodes N] | stop | status | env" >&2; exit 2 ;;
esac
