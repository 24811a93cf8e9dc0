#!/usr/bin/env bash
# Run a command as if on a slower day: the command and everything it starts (pytest workers,
# torchrun ranks, the Slurm daemons the test suite starts) share a CPU quota, so a budget
# measured on a fast machine can be read against the days the README's budgets name.
#
#   scripts/at_speed.sh CPUS COMMAND [ARGS...]
#
# CPUS is the CPU time per wall second the command may use (2 = both cores, no limit on a
# 2-core machine; 0.5 = half a core). Calibrate it with the main job, whose 180-step run is the
# README's measure of a day (38 s on a fast day, 122 s on a slow one):
#
#   scripts/at_speed.sh 1.5 make train      # the 'Run completed in ...' line
#
# Measured 2026-12-05 on a 2-core x86_64 whose own main job ran in 21.2 s: 1.5 -> 37.3 s (a
# fast day), 0.47 -> 117.1 s (a slow day). A quota is not a slower CPU: the group is stopped
# for the rest of each 10 ms period once its time is used, so waits between processes (a
# collective, an RPC) can end up to 10 ms later than on a uniformly slower machine.
# Needs root and the cgroup v1 cpu controller (/sys/fs/cgroup/cpu) or cgroup v2.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 CPUS COMMAND [ARGS...]" >&2; exit 2; }
cpus=$1
shift
period=10000 # microseconds
quota=$(python3 -c "import sys; c = float(sys.argv[1]); assert c > 0; print(int(c * $period))" \
  "$cpus" 2>/dev/null) || { echo "$0: CPUS must be a number > 0, not '$cpus'" >&2; exit 2; }
name="experiments-at-speed-$$"
if [ -d /sys/fs/cgroup/cpu ] && [ -w /sys/fs/cgroup/cpu ]; then # cgroup v1
  group=/sys/fs/cgroup/cpu/$name
  mkdir "$group"
  echo "$period" >"$group/cpu.cfs_period_us"
  echo "$quota" >"$group/cpu.cfs_quota_us"
elif [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
  group=/sys/fs/cgroup/$name # cgroup v2
  echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
  mkdir "$group"
  echo "$quota $period" >"$group/cpu.max"
else
  echo "$0: no writable cgroup cpu controller here (needs root)" >&2
  exit 3
fi
echo "at_speed: $cpus CPUs (quota $quota us per $period us) in $group" >&2
# The group is removed once its last process has ended (the Slurm daemons a test session
# started end with it); rmdir fails harmlessly while any is left.
trap 'rmdir "$group" 2>/dev/null || true' EXIT
bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' at_speed "$group" "$@"
