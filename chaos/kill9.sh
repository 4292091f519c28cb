#!/usr/bin/env bash
# Chaos: kill -9 of the PCRF under load, CYCLES times, restarting it on the
# same data each time; then checks that no acknowledged session or usage
# change was lost and no usage was counted twice.
#
# One `pcrf-bench run` offers the seed scenario (CCR-I, CCR-U with usage,
# CCR-T) at RATE to provisioned subscribers the whole time, retransmitting
# (T flag, same CC-Request-Number) whatever timed out or lost its
# connection, and logging every request's final outcome. Meanwhile this
# script kills `pcrf serve` with SIGKILL after a random 2..6 s of load and
# restarts it at once. After the load (drained: every session ends with a
# CCR-T) the server is killed and restarted once more, and
# `pcrf-bench verify` compares the answer log with the store through the API.
#
#   chaos/kill9.sh                     # 100 cycles, embedded store
#   CYCLES=20 chaos/kill9.sh
#   STORE=postgres chaos/kill9.sh      # a throwaway PostgreSQL cluster
#
# Environment: CYCLES (100), RATE (500 requests/s), SUBSCRIBERS (2000),
# MIN_UP / MAX_UP (2 / 6 s of load between kills), RETRANSMIT (20 tries),
# STORE (sqlite | postgres), BUILD (1; 0 uses the release binaries as they
# are), KEEP (0; 1 keeps the work directory).
# Prints cycles, requests, retransmissions, losses, double counts, wall time;
# exits non-zero when verify finds a loss or a double count.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

CYCLES="${CYCLES:-100}"
RATE="${RATE:-500}"
SUBSCRIBERS="${SUBSCRIBERS:-2000}"
MIN_UP="${MIN_UP:-2}"
MAX_UP="${MAX_UP:-6}"
RETRANSMIT="${RETRANSMIT:-20}"
STORE="${STORE:-sqlite}"
check_kill_cycles

build_release pcrf pcrf-bench
chaos_workdir kill9 GEN_PID

started=$SECONDS
[[ $STORE == postgres ]] && start_postgres
chaos_config "$work" "$STORE"
chaos_start "$work" || die "pcrf serve did not start"
log "pcrf serve (pid $PCRF_PID, $STORE) on 127.0.0.1:$DIAMETER_PORT, API $API_URL; provisioning $SUBSCRIBERS subscribers"
provision_population "$SUBSCRIBERS"

# The load lasts about as long as the cycles (mean up time + ~1 s to
# restart each); the kill loop stops when the load ends.
duration=$((CYCLES * ((MIN_UP + MAX_UP) / 2 + 1)))
log "load: $RATE requests/s for ${duration}s, retransmitting up to $RETRANSMIT times; $CYCLES kill -9 cycles"
"$BIN/pcrf-bench" run --scenario "$CHAOS_ROOT/bench/scenarios/seed.toml" \
  --target "127.0.0.1:$DIAMETER_PORT" --peers 4 --subscribers "$SUBSCRIBERS" \
  --rate "$RATE" --duration "${duration}s" --warmup 1s \
  --retransmit "$RETRANSMIT" --retransmit-wait 5s \
  --answer-log "$work/answers.jsonl" --out "$work/report.json" \
  --json >"$work/gen.json" 2>"$work/gen.err" &
GEN_PID=$!

cycles=0
restart_ms_total=0
restart_ms_max=0
while ((cycles < CYCLES)) && kill -0 "$GEN_PID" 2>/dev/null; do
  up_ms=$((MIN_UP * 1000 + RANDOM % ((MAX_UP - MIN_UP) * 1000 + 1)))
  sleep "$(printf '%d.%03d' $((up_ms / 1000)) $((up_ms % 1000)))"
  kill -0 "$GEN_PID" 2>/dev/null || break
  t0=$(now_ms)
  chaos_kill9
  chaos_start "$work" || die "restart after kill -9 #$((cycles + 1)) failed"
  dt=$(($(now_ms) - t0))
  restart_ms_total=$((restart_ms_total + dt))
  ((dt > restart_ms_max)) && restart_ms_max=$dt
  cycles=$((cycles + 1))
  if ((cycles % 10 == 0)); then log "cycle $cycles: restarted in ${dt} ms"; fi
done
log "$cycles kill -9 cycles done; waiting for the load to drain"
gen_rc=0
wait "$GEN_PID" || gen_rc=$?
GEN_PID=""
((gen_rc == 0)) || log "pcrf-bench run exited $gen_rc: $(tail -3 "$work/gen.err")"
grep -E '^(answer log|retransmissions|results|sessions):' "$work/gen.err" >&2 || true

# Once more after the drain, so that verify reads only what survived a kill.
chaos_kill9
chaos_start "$work" || die "final restart failed"
verify_rc=0
"$BIN/pcrf-bench" verify --answer-log "$work/answers.jsonl" --api "$API_URL" \
  --out "$work/verdict.json" >"$work/verify.txt" 2>&1 || verify_rc=$?
cat "$work/verify.txt"

python3 - "$work/verdict.json" "$work/report.json" <<EOF
import json, sys
v = json.load(open(sys.argv[1]))
try:
    r = json.load(open(sys.argv[2]))
    rtx = r.get("delivery", {}).get("retransmissions", 0)
except Exception:
    rtx = v["retransmissions"]
print("kill9 ($STORE): cycles $cycles, requests {} ({} acknowledged, {} unanswered after retransmission), retransmissions {}, "
      "losses {} (octets {}), double counts {} (octets {}), sessions inconsistent {}, forgotten {}, "
      "restart mean $((restart_ms_total / (cycles > 0 ? cycles : 1))) ms max $restart_ms_max ms, wall $((SECONDS - started)) s"
      .format(v["requests"], v["acknowledged"], v["unanswered"], rtx, v["usage_lost"], v["octets_lost"],
              v["usage_double_counted"], v["octets_double_counted"], v["sessions_inconsistent"], v["sessions_forgotten"]))
EOF
exit "$verify_rc"
