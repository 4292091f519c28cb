#!/usr/bin/env bash
# Chaos: misbehaving Diameter peers beside a well-behaved one (peers that
# flap, stall (stop reading), send half messages or flood must each be
# handled without affecting the other peers).
#
# One `pcrf serve` (embedded store). For each of baseline, flap, stall,
# half, flood: a well-behaved `pcrf-bench run` (seed scenario, RATE
# requests/s, 2 gateways) for DURATION s while `pcrf-bench misbehave
# --mode M` does its worst as peer bad-N.bench.test:
#   flap   connect, CER, drop, again, as fast as it goes
#   stall  opens 20 sessions, then stops reading while RARs are asked for
#          them through the API (reauth + release, 4 at a time)
#   half   20 connections send a header promising 2000 bytes and 120 of
#          them, then nothing (half of them before CER)
#   flood  pipelined CCR-Is, 1000 per write, far beyond the in-flight caps
# Prints, per case, the good peer's success rate and latency and what the
# bad peer saw; exits non-zero if the good peer lost any request or the
# server died.
#
# Environment: RATE (200), DURATION (20 s), SUBSCRIBERS (2000), CASES
# ("baseline flap stall half flood"), BUILD, KEEP.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

RATE="${RATE:-200}"
DURATION="${DURATION:-20}"
SUBSCRIBERS="${SUBSCRIBERS:-2000}"
CASES="${CASES:-baseline flap stall half flood}"
((DURATION >= 5 && DURATION <= 600)) || die "DURATION must be 5..600 s"

build_release pcrf pcrf-bench
chaos_workdir peers BAD_PID GOOD_PID

chaos_config "$work" sqlite 8
chaos_start "$work" || die "pcrf serve did not start"
provision_population "$SUBSCRIBERS"
log "pcrf serve (pid $PCRF_PID) on 127.0.0.1:$DIAMETER_PORT; cases: $CASES"

failures=0
n=0
printf '%-9s %9s %9s %8s %8s %8s %8s  %s\n' case sent success ok% p50ms p99ms maxms "bad peer"
for c in $CASES; do
  n=$((n + 1))
  if [[ $c != baseline ]]; then
    "$BIN/pcrf-bench" misbehave --mode "$c" --target "127.0.0.1:$DIAMETER_PORT" \
      --origin-host "bad-$n.bench.test" --api "$API_URL" --subscribers "$SUBSCRIBERS" \
      --scenario "$CHAOS_ROOT/bench/scenarios/seed.toml" \
      --duration "$((DURATION + 3))s" --max-requests 200000 >"$work/bad-$c.json" 2>"$work/bad-$c.err" &
    BAD_PID=$!
    sleep 1
  fi
  "$BIN/pcrf-bench" run --scenario "$CHAOS_ROOT/bench/scenarios/seed.toml" \
    --target "127.0.0.1:$DIAMETER_PORT" --peers 2 --subscribers "$SUBSCRIBERS" \
    --rate "$RATE" --duration "${DURATION}s" --warmup 2s \
    --json --out "$work/good-$c.json" >/dev/null 2>"$work/good-$c.err" &
  GOOD_PID=$!
  wait "$GOOD_PID" || log "$c: the good peer's run exited non-zero: $(tail -2 "$work/good-$c.err")"
  GOOD_PID=""
  if [[ -n "$BAD_PID" ]]; then
    wait "$BAD_PID" || true
    BAD_PID=""
  fi
  alive=yes
  kill -0 "$PCRF_PID" 2>/dev/null || alive=no
  line=$(python3 - "$c" "$work/good-$c.json" "$work/bad-$c.json" "$alive" <<'EOF'
import json, sys
c, good, bad, alive = sys.argv[1:5]
try:
    g = json.load(open(good))["total"]
except Exception as e:
    print(f"{c:<9} no report ({e}) FAIL")
    sys.exit()
lat = g.get("latency") or {}
ok = 100.0 * g["succeeded"] / g["sent"] if g["sent"] else 0.0
b = ""
if c != "baseline":
    try:
        r = json.load(open(bad))
        parts = [f"connections {r['connections']}", f"closed by server {r['closed_by_server']}"]
        if r["cycles"]: parts.append(f"cycles {r['cycles']}")
        if r["requests_sent"]: parts.append(f"requests {r['requests_sent']}")
        if r["answers"]: parts.append("answers " + " ".join(f"{k}:{v}" for k, v in r["answers"].items()))
        if r["rar_asked"]: parts.append(f"RARs asked {r['rar_asked']} (API " + " ".join(f"{k}:{v}" for k, v in r["api_status"].items()) + ")")
        if r["errors"]: parts.append(f"errors: {r['errors'][0][:80]}")
        b = ", ".join(parts)
    except Exception as e:
        b = f"no report ({e})"
verdict = "ok" if g["sent"] > 0 and g["succeeded"] == g["sent"] and alive == "yes" else "FAIL"
if alive != "yes": b += " SERVER DIED"
print(f"{c:<9} {g['sent']:>9} {g['succeeded']:>9} {ok:>8.2f} {lat.get('p50_ms', 0):>8.2f} {lat.get('p99_ms', 0):>8.2f} {lat.get('max_ms', 0):>8.1f}  {b} [{verdict}]")
EOF
)
  echo "$line"
  [[ $line == *"[ok]" ]] || failures=$((failures + 1))
  [[ $alive == yes ]] || die "pcrf serve died during $c: $(tail -5 "$work/pcrf.err")"
  sleep 2
done
echo "peers: $failures of $n cases affected the well-behaved peer"
((failures == 0))
