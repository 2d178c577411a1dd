# Shared by the benchmark scripts (sourced, not run): loopback ports and
# a process's CPU time. Messages name the script that sourced this file.

# free_port: a port on 127.0.0.1 that nothing answers on.
free_port() {
  local port
  for _ in $(seq 100); do
    port=$((20000 + RANDOM % 20000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
  echo "${0##*/}: no free port" >&2
  exit 1
}

# wait_port PORT: returns once something listens on 127.0.0.1:PORT
# (10 s at most).
wait_port() {
  for _ in $(seq 200); do
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
