# Shared by the benchmark scripts (sourced, not run): loopback ports and
# a process's CPU time. Messages name the script that sourced this file.

# free_port [OFFSET]: a port on 127.0.0.1 that nothing answers on; with
# OFFSET, nothing answers on port + OFFSET either (a Redis Cluster node's
# bus port is 10000 above its own).
free_port() {
  local port offset=${1:-}
  for _ in $(seq 100); do
    port=$((20000 + RANDOM % 20000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null &&
      { [ -z "$offset" ] || ! (exec 3<>"/dev/tcp/127.0.0.1/$((port + offset))") 2>/dev/null; }; then
      echo "$port"
      return
    fi
  done
  echo "${0##*/}: no free port" >&2
  exit 1
}

# wait_port PORT [SECONDS]: returns once something listens on
# 127.0.0.1:PORT (within SECONDS, 10 by default).
wait_port() {
  for _ in $(seq $((${2:-10} * 20))); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "${0##*/}: nothing listens on $1" >&2
  exit 1
}

# cpu_ticks PID: utime + stime of the process, in clock ticks.
cpu_ticks() {
  awk '{ print $14 + $15 }' "/proc/$1/stat"
}

# user_ticks PID: utime of the process alone (its own code, not the
# kernel's on its behalf), in clock ticks.
user_ticks() {
  awk '{ print $14 }' "/proc/$1/stat"
}
