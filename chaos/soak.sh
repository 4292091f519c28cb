#!/usr/bin/env bash
# Chaos: a soak at 80% of a given zero-loss throughput: memory and latency
# should stay flat over an hour of it, and the recorded series shows whether
# they do.
#
# `pcrf serve` (embedded store, durability full) under the seed scenario at
# 0.8 x ZERO_LOSS_TPS for DURATION, as one open-loop `pcrf-bench run` with
# `--series`: every SLICE s one CSV row with the requests finished in that
# slice, their latency percentiles (from intended send times) and the
# server's RSS (chaos/results/soak-<date>.csv unless OUT is set), so that a
# drift or a leak shows over time instead of hiding in an hour's average.
# At the end: first vs last RSS, the p99 of the first and last tenth of the
# slices, and the worst slice.
#
#   ZERO_LOSS_TPS=3000 chaos/soak.sh              # 1 hour at 2400 TPS
#   ZERO_LOSS_TPS=3000 DURATION=600 chaos/soak.sh # 10 minutes
#
# Environment: ZERO_LOSS_TPS (required: from bench/zero-loss.sh or
# BENCHMARKS.md), DURATION (3600 s), SLICE (10 s), SUBSCRIBERS (100000),
# SCENARIO (bench/scenarios/seed-fast.toml, the mix bench/zero-loss.sh
# measures), OUT, BUILD, KEEP.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

[[ -n "${ZERO_LOSS_TPS:-}" ]] || die "set ZERO_LOSS_TPS (the zero-loss throughput measured on this machine)"
DURATION="${DURATION:-3600}"
SLICE="${SLICE:-10}"
SUBSCRIBERS="${SUBSCRIBERS:-100000}"
SCENARIO="${SCENARIO:-$CHAOS_ROOT/bench/scenarios/seed-fast.toml}"
((DURATION >= SLICE && DURATION <= 86400)) || die "DURATION must be SLICE..86400 s"
rate=$(python3 -c "print(round(0.8 * float('$ZERO_LOSS_TPS')))")
mkdir -p "$CHAOS_ROOT/chaos/results"
OUT="${OUT:-$CHAOS_ROOT/chaos/results/soak-$(date +%Y%m%d-%H%M%S).csv}"

build_release pcrf pcrf-bench
chaos_workdir soak GEN_PID

chaos_config "$work" sqlite
chaos_start "$work" || die "pcrf serve did not start"
provision_population "$SUBSCRIBERS"
log "soak: $rate TPS (80% of $ZERO_LOSS_TPS) for ${DURATION}s in ${SLICE}s slices -> $OUT"

rc=0
"$BIN/pcrf-bench" run \
  --target "127.0.0.1:$DIAMETER_PORT" --peers 4 --subscribers "$SUBSCRIBERS" \
  --scenario "$SCENARIO" --rate "$rate" --duration "${DURATION}s" --server-pid "$PCRF_PID" \
  --series "$OUT" --series-every "${SLICE}s" \
  --json --out "$work/report.json" >/dev/null 2>"$work/run.err" &
# In the background, so that a signal to this script is handled at once.
GEN_PID=$!
wait "$GEN_PID" || rc=$?
GEN_PID=""
((rc == 0)) || log "pcrf-bench run exited $rc: $(tail -2 "$work/run.err")"
kill -0 "$PCRF_PID" 2>/dev/null || die "pcrf serve died during the soak: $(tail -5 "$work/pcrf.err")"
grep -E '^(results|achieved|server CPU)' "$work/run.err" || true
python3 - "$OUT" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
n = len(rows)
k = max(1, n // 10)
def avg(rs, f): return sum(float(r[f]) for r in rs) / len(rs)
first, last = rows[:k], rows[-k:]
sent = sum(int(r["finished"]) for r in rows); ok = sum(int(r["succeeded"]) for r in rows)
worst = max(rows, key=lambda r: float(r["p99_ms"]))
print(f"soak: {n} slices, {sent} requests finished, {ok} succeeded ({100.0 * ok / max(sent, 1):.3f}%)")
print(f"soak: RSS first {int(rows[0]['rss_kb']) / 1024:.1f} MiB, last {int(rows[-1]['rss_kb']) / 1024:.1f} MiB, "
      f"max {max(int(r['rss_kb']) for r in rows) / 1024:.1f} MiB")
print(f"soak: p99 first tenth {avg(first, 'p99_ms'):.2f} ms, last tenth {avg(last, 'p99_ms'):.2f} ms; "
      f"p50 {avg(first, 'p50_ms'):.2f} -> {avg(last, 'p50_ms'):.2f} ms; worst slice p99 {float(worst['p99_ms']):.2f} ms at {worst['t_s']} s")
print(f"soak: series in {sys.argv[1]}")
EOF
