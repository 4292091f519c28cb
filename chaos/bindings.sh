#!/usr/bin/env bash
# Chaos: kill -9 of the PCRF under 4G and 5G load at once, CYCLES times;
# then checks that no binding was lost or left behind: the BSF's PCF
# bindings against the open N7 sessions, the AF sessions (N5) against
# what their P-CSCF was told, and (as kill9.sh) no acknowledged Gx usage
# or session change lost.
#
# Two loads run together:
# - `pcrf-bench run`: the seed scenario over Gx at GX_RATE, retransmitting
#   what timed out, with an answer log (as kill9.sh);
# - chaos/bindings.py: VoNR calls at CALLS per second over N7 and N5
#   (PDU session, voice AF session, hold, release), a tenth of them left
#   open to the end, every request sent again until answered; it also
#   plays the BSF, which keeps every binding it is given.
# Meanwhile the script kills `pcrf serve` with SIGKILL after a random
# MIN_UP..MAX_UP s and restarts it at once. After the load the server is
# killed and restarted once more; then bindings.py compares (see its
# header) and `pcrf-bench verify` checks the Gx usage.
#
#   chaos/bindings.sh                  # 100 cycles, embedded store
#   CYCLES=10 chaos/bindings.sh
#   STORE=postgres chaos/bindings.sh
#   BSF_MODE=keep-all chaos/bindings.sh   # a BSF that keeps every binding
#
# Environment: CYCLES (100), CALLS (20 calls/s), GX_RATE (200 requests/s),
# SUBSCRIBERS (2000, Gx), MIN_UP / MAX_UP (2 / 6 s), STORE (sqlite |
# postgres), BSF_MODE (per-address: one binding per UE address, as
# open5gs's BSF; keep-all: every binding registered), BUILD (1), KEEP (0;
# 1 keeps the work directory).
# Exits non-zero when any binding or session was lost or left behind, or
# verify finds a loss or a double count.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

CYCLES="${CYCLES:-100}"
CALLS="${CALLS:-20}"
GX_RATE="${GX_RATE:-200}"
SUBSCRIBERS="${SUBSCRIBERS:-2000}"
MIN_UP="${MIN_UP:-2}"
MAX_UP="${MAX_UP:-6}"
STORE="${STORE:-sqlite}"
BSF_MODE="${BSF_MODE:-per-address}"
check_kill_cycles

build_release pcrf pcrf-bench
chaos_workdir bindings GEN_PID PY_PID

started=$SECONDS
[[ $STORE == postgres ]] && start_postgres
chaos_config "$work" "$STORE"
SBI_PORT="$(free_port)"
BSF_PORT="$(free_port)"
{
  echo '[sbi]'
  echo "listen = \"127.0.0.1:$SBI_PORT\""
  echo '[sbi.bsf]'
  echo "uri = \"http://127.0.0.1:$BSF_PORT/bsf\""
} >>"$work/pcrf.toml"
chaos_start "$work" || die "pcrf serve did not start"
log "pcrf serve (pid $PCRF_PID, $STORE): Gx 127.0.0.1:$DIAMETER_PORT, SBI 127.0.0.1:$SBI_PORT, BSF 127.0.0.1:$BSF_PORT"
provision_population "$SUBSCRIBERS"

duration=$((CYCLES * ((MIN_UP + MAX_UP) / 2 + 1)))
log "load: Gx $GX_RATE requests/s and $CALLS VoNR calls/s for ${duration}s; $CYCLES kill -9 cycles"
python3 "$CHAOS_ROOT/chaos/bindings.py" --sbi "127.0.0.1:$SBI_PORT" --api "$API_URL" \
  --port "$BSF_PORT" --work "$work" --rate "$CALLS" --duration "$duration" --bsf "$BSF_MODE" \
  >"$work/bindings.json" 2>"$work/bindings.err" &
PY_PID=$!
# The calls start once their subscribers are provisioned; so do the Gx
# load and the kills.
for _ in $(seq 600); do
  [[ -e "$work/provisioned" ]] && break
  kill -0 "$PY_PID" 2>/dev/null || die "bindings.py stopped: $(tail -5 "$work/bindings.err")"
  sleep 0.1
done
[[ -e "$work/provisioned" ]] || die "bindings.py did not provision its subscribers within 60 s"
"$BIN/pcrf-bench" run --scenario "$CHAOS_ROOT/bench/scenarios/seed.toml" \
  --target "127.0.0.1:$DIAMETER_PORT" --peers 4 --subscribers "$SUBSCRIBERS" \
  --rate "$GX_RATE" --duration "${duration}s" --warmup 1s \
  --retransmit 20 --retransmit-wait 5s \
  --answer-log "$work/answers.jsonl" --out "$work/report.json" \
  --json >"$work/gen.json" 2>"$work/gen.err" &
GEN_PID=$!

cycles=0
while ((cycles < CYCLES)) && kill -0 "$GEN_PID" 2>/dev/null && kill -0 "$PY_PID" 2>/dev/null \
  && [[ ! -e "$work/load-done" ]]; do
  up_ms=$((MIN_UP * 1000 + RANDOM % ((MAX_UP - MIN_UP) * 1000 + 1)))
  sleep "$(printf '%d.%03d' $((up_ms / 1000)) $((up_ms % 1000)))"
  kill -0 "$GEN_PID" 2>/dev/null || break
  chaos_kill9
  chaos_start "$work" || die "restart after kill -9 #$((cycles + 1)) failed"
  cycles=$((cycles + 1))
  if ((cycles % 10 == 0)); then log "cycle $cycles"; fi
done
log "$cycles kill -9 cycles done; waiting for the loads to drain"
gen_rc=0
wait "$GEN_PID" || gen_rc=$?
GEN_PID=""
((gen_rc == 0)) || log "pcrf-bench run exited $gen_rc: $(tail -3 "$work/gen.err")"
while [[ ! -e "$work/load-done" ]]; do
  kill -0 "$PY_PID" 2>/dev/null || die "bindings.py stopped: $(tail -5 "$work/bindings.err")"
  sleep 1
done

# Once more after the drain, so that what is checked survived a kill.
chaos_kill9
chaos_start "$work" || die "final restart failed"
touch "$work/check-now"
py_rc=0
wait "$PY_PID" || py_rc=$?
PY_PID=""
tail -n 20 "$work/bindings.err" >&2
verify_rc=0
"$BIN/pcrf-bench" verify --answer-log "$work/answers.jsonl" --api "$API_URL" \
  --out "$work/verdict.json" >"$work/verify.txt" 2>&1 || verify_rc=$?
tail -n 3 "$work/verify.txt"

python3 - "$work/bindings-verdict.json" "$work/verdict.json" <<EOF
import json, sys
b = json.load(open(sys.argv[1]))
v = json.load(open(sys.argv[2]))
print("bindings ($STORE, BSF {bsf}): cycles $cycles, calls {calls} ({calls_kept_open} kept open, {calls_failed} failed), "
      "request retries {retries}; open N7 sessions {open_n7_sessions}, BSF bindings {bsf_bindings}: "
      "lost {bindings_lost}, left behind {bindings_left_behind}; "
      "PDU sessions lost {pdu_sessions_lost}, left behind {pdu_sessions_left_behind}; "
      "AF sessions lost {af_sessions_lost}, left behind {af_sessions_left_behind}; ".format(**b)
      + "Gx: requests {} ({} acknowledged), losses {}, double counts {}, sessions inconsistent {}, forgotten {}; wall $((SECONDS - started)) s"
      .format(v["requests"], v["acknowledged"], v["usage_lost"], v["usage_double_counted"],
              v["sessions_inconsistent"], v["sessions_forgotten"]))
EOF
((py_rc == 0 && verify_rc == 0))
