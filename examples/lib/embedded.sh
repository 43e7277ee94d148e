# Sourced by the examples' run.sh: starts `sluice run` on the embedded Kafka (in-process,
# on a loopback port of its own) and finds that port in its log.
#
#   start_sluice CONFIG     sets $pid, $brokers and $log (in $work, which the caller makes)
#   wait_assigned N         waits until N tasks hold partitions (the group has formed)
#   stop_sluice             SIGTERM, and waits; its exit status
#   show_log                the log's last lines, on stderr

start_sluice() {
  log=$work/sluice.log
  KAFKA_BROKERS=embedded "$sluice" run --config "$1" 2>"$log" &
  pid=$!
  brokers=
  for _ in $(seq 1 300); do
    brokers=$(grep -o 'brokers=[^ ]*' "$log" | head -n1 | cut -d= -f2 | tr -d '"' || true)
    [ -n "$brokers" ] && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "sluice exited at start; its log:" >&2
      cat "$log" >&2
      return 1
    fi
    sleep 0.1
  done
  echo "sluice did not start its embedded Kafka within 30 s; its log:" >&2
  cat "$log" >&2
  return 1
}

wait_assigned() {
  for _ in $(seq 1 600); do
    tasks=$(grep 'partitions assigned' "$log" | grep -o 'task=[0-9]*' | sort -u | wc -l || true)
    [ "$tasks" -ge "$1" ] && return 0
    sleep 0.1
  done
  echo "the consumer group did not form within 60 s; sluice's log:" >&2
  tail -n 40 "$log" >&2
  return 1
}

stop_sluice() {
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid"
}

show_log() {
  echo "--- the last lines of sluice's log ($log):" >&2
  tail -n 40 "$log" >&2
}
