#!/usr/bin/env bash
# Notifications (docs/notifications.md): what they cost on the Gx path and
# how fast a backlog drains to each sink, on the embedded store.
#
#   1. Gx cost: the seed scenario at RATE for DURATION without sinks, then
#      with a webhook sink (a local receiver) and an AMQP sink (RabbitMQ on
#      127.0.0.1:5672) taking every event live; CPU per transaction and
#      latency from pcrf-bench, events delivered from the status.
#   2. Drain: the same load with both sinks pointing at closed ports (the
#      backlog grows), then the server restarted on the same store with the
#      sinks reachable; events/s = backlog / time to drain, per sink.
#
# Subscriber events (the provisioning's) are not routed, so only the
# load's own events (sessions, quota thresholds, the policy's quota-80)
# are measured. Nothing is bound to the AMQP exchange: the broker confirms
# and drops them. Environment: BUILD (1; 0 uses existing release binaries), RATE (1000),
# DURATION (20s), PEERS (4), SUBSCRIBERS (20000), SCENARIO (seed.toml).
# Needs RabbitMQ listening on 127.0.0.1:5672 (guest/guest) and python3
# (the webhook receiver). Writes bench/results/notifications-*.json.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

RATE="${RATE:-1000}"
DURATION="${DURATION:-20s}"
PEERS="${PEERS:-4}"
SUBSCRIBERS="${SUBSCRIBERS:-20000}"
SCENARIO="${SCENARIO:-$BENCH_ROOT/bench/scenarios/seed.toml}"
need python3 python3
(exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null || die "RabbitMQ is not listening on 127.0.0.1:5672"

build_release pcrf-bench pcrf
work="$(mktemp -d "${TMPDIR:-/tmp}/pcrf-notify-bench.XXXXXX")"
RECEIVER_PID=""
trap 'stop_server; [[ -n "$RECEIVER_PID" ]] && kill "$RECEIVER_PID" 2>/dev/null; rm -rf "$work"' EXIT

# A webhook receiver answering 200 to every POST (threads, no checks).
hook_port="$(free_port)"
python3 - "$hook_port" >"$work/receiver.log" 2>&1 <<'PY' &
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
RECEIVER_PID=$!
wait_port "$hook_port" 10 || die "webhook receiver did not start"

# sinks_config HOOK_URL AMQP_URL: the [notifications] section.
sinks_config() {
  cat <<TOML
[notifications]
max_backlog = 2000000
[[notifications.sinks]]
name = "hook"
kind = "webhook"
url = "$1"
secret = "bench-secret"
events = ["session.*", "quota.*", "policy.*"]
concurrency = 16
retry_initial_ms = 100
retry_max_ms = 1000
[[notifications.sinks]]
name = "bus"
kind = "amqp"
url = "$2"
exchange = "pcrf.bench"
events = ["session.*", "quota.*", "policy.*"]
concurrency = 16
retry_initial_ms = 100
retry_max_ms = 1000
TOML
}

status() { curl -sS "$API_URL/v1/notifications/status"; }
backlog_of() { status | python3 -c "import sys,json; d=json.load(sys.stdin); print({s['name']: s['backlog'] for s in d['sinks']}.get('$1', 0))"; }

run_load() { # NAME: the seed load against the running server
  "$BIN/pcrf-bench" run --scenario "$SCENARIO" --target "127.0.0.1:$DIAMETER_PORT" \
    --peers "$PEERS" --subscribers "$SUBSCRIBERS" --rate "$RATE" --duration "$DURATION" \
    --server-pid "$SERVER_PID" --provision "$API_URL" \
    --out "$BENCH_ROOT/bench/results/notifications-$1.json" >"$work/$1.txt"
  echo "== $1"; cat "$work/$1.txt"
}

# 1. Gx cost.
mkdir -p "$work/none" "$work/live" "$work/drain"
: >"$work/none.toml"
PCRF_EXTRA_CONFIG="$work/none.toml" start_pcrf "$work/none" "$PEERS"
run_load gx-no-sinks
stop_server
sinks_config "http://127.0.0.1:$hook_port/hook" "amqp://guest:guest@127.0.0.1:5672/%2f" >"$work/live.toml"
PCRF_EXTRA_CONFIG="$work/live.toml" start_pcrf "$work/live" "$PEERS"
run_load gx-live-sinks
sleep 2
echo "== status after the live run"; status; echo
stop_server

# 2. Drain: back up behind closed ports, then restart with the sinks reachable.
sinks_config "http://127.0.0.1:9/hook" "amqp://guest:guest@127.0.0.1:9/%2f" >"$work/closed.toml"
PCRF_EXTRA_CONFIG="$work/closed.toml" start_pcrf "$work/drain" "$PEERS"
run_load backlog
hook_n="$(backlog_of hook)"; bus_n="$(backlog_of bus)"
stop_server
# Timed from the start of the process: start-up (reading the outbox back)
# is included, so the rates are lower bounds.
start=$(date +%s.%N); hook_t=""; bus_t=""
PCRF_EXTRA_CONFIG="$work/live.toml" start_pcrf "$work/drain" "$PEERS"
while [[ -z "$hook_t" || -z "$bus_t" ]]; do
  now=$(date +%s.%N)
  [[ -z "$hook_t" && "$(backlog_of hook)" == 0 ]] && hook_t=$(echo "$now - $start" | bc)
  [[ -z "$bus_t" && "$(backlog_of bus)" == 0 ]] && bus_t=$(echo "$now - $start" | bc)
  (( $(echo "$now - $start > 600" | bc) )) && die "backlog did not drain in 600 s: $(status)"
  sleep 0.2
done
echo "== drain (start-up included)"
echo "webhook: $hook_n events in $hook_t s: $(echo "$hook_n / $hook_t" | bc) events/s"
echo "amqp:    $bus_n events in $bus_t s: $(echo "$bus_n / $bus_t" | bc) events/s"
