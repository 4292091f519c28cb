#!/usr/bin/env bash
# Zero-loss throughput of the seed scenario, against `pcrf serve` (embedded
# store, durability full) and against `pcrf-bench echo-server` (the ceiling
# of generator + transport on this machine) in one run, and their ratio.
# A trial passes when every request got a 2xxx answer, none timed out,
# p99 <= P99_BOUND and the offered rate was achieved; the search doubles
# the rate from MIN (up to MAX) until a trial fails, then bisects, resting
# RECOVERY after every failed trial.
#
#   bench/zero-loss.sh                  # both, and the ratio
#   bench/zero-loss.sh --echo           # the echo server only
#   bench/zero-loss.sh --pcrf           # pcrf only
#   STORE=postgres bench/zero-loss.sh --pcrf   # pcrf on a throwaway PostgreSQL cluster
#                                       # (PG_CONF, COMMIT_WINDOW_US as in seed-scenario.sh)
#
# Environment: BUILD (1; 0 uses existing release binaries), MIN (1000), MAX (60000), DURATION per trial (10s), WARMUP per
# trial (2s), P99_BOUND (10ms), MIN_ACHIEVED (0.99), MAX_TRIALS (14), RESOLUTION (0.02), PAUSE (2s), RECOVERY (15s),
# PEERS (4), SUBSCRIBERS (100000), TIMEOUT (the scenario's: 2s), SCENARIO (bench/scenarios/seed-fast.toml:
# the seed mix with hold times / 4, so a trial reaches its steady mix quickly).
# SERVER_CPUS and GEN_CPUS pin the server (pcrf and echo alike) and the generator (taskset lists; default on more
# than 2 CPUs: the first half for the server, the rest for the generator); PCRF_BIN and BENCH_BIN name prebuilt
# binaries. The core-scaling table (the same search at 1, 2, 4, 8 server cores): bench/scaling.sh.
# Writes bench/results/zero-loss-<pcrf|echo>.json and bench/results/zero-loss.json.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need jq jq

targets=(echo pcrf)
for a in "$@"; do
  case "$a" in
    --echo) targets=(echo) ;;
    --pcrf) targets=(pcrf) ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) die "unknown argument $a (use --echo or --pcrf)" ;;
  esac
done
MIN="${MIN:-1000}"
MAX="${MAX:-60000}"
DURATION="${DURATION:-10s}"
WARMUP="${WARMUP:-2s}"
P99_BOUND="${P99_BOUND:-10ms}"
MIN_ACHIEVED="${MIN_ACHIEVED:-0.99}"
MAX_TRIALS="${MAX_TRIALS:-14}"
RESOLUTION="${RESOLUTION:-0.02}"
PAUSE="${PAUSE:-2s}"
RECOVERY="${RECOVERY:-15s}"
PEERS="${PEERS:-4}"
SUBSCRIBERS="${SUBSCRIBERS:-100000}"
SCENARIO="${SCENARIO:-$BENCH_ROOT/bench/scenarios/seed-fast.toml}"

if [[ " ${targets[*]} " == *" pcrf "* ]]; then build_release pcrf-bench pcrf; else build_release pcrf-bench; fi
set_pinning
work="$(mktemp -d "${TMPDIR:-/tmp}/pcrf-bench.XXXXXX")"
trap 'stop_server; stop_postgres; rm -rf "$work"' EXIT

for kind in "${targets[@]}"; do
  mkdir -p "$work/$kind"
  [[ $kind == pcrf && "${STORE:-sqlite}" == postgres ]] && start_postgres
  if [[ $kind == pcrf ]]; then start_pcrf "$work/$kind" "$PEERS"; else start_echo "$work/$kind"; fi
  suffix="$kind"
  [[ $kind == pcrf && "${STORE:-sqlite}" == postgres ]] && suffix="pcrf-postgres"
  out="$BENCH_ROOT/bench/results/zero-loss-$suffix.json"
  args=(zero-loss --scenario "$SCENARIO" --target "127.0.0.1:$DIAMETER_PORT"
        --peers "$PEERS" --subscribers "$SUBSCRIBERS"
        --min "$MIN" --max "$MAX" --duration "$DURATION" --warmup "$WARMUP"
        --p99-bound "$P99_BOUND" --min-achieved "$MIN_ACHIEVED" --max-trials "$MAX_TRIALS" --resolution "$RESOLUTION"
        --pause "$PAUSE" --recovery "$RECOVERY" --server-pid "$SERVER_PID" --out "$out")
  [[ -n "$API_URL" ]] && args+=(--provision "$API_URL")
  if [[ -n "$PG_TMP" ]]; then
    for p in $(postgres_pids); do args+=(--db-pid "$p"); done
  fi
  [[ -n "${TIMEOUT:-}" ]] && args+=(--timeout "$TIMEOUT")
  echo "== $kind ==" >&2
  gen "${args[@]}"
  stop_server
  stop_postgres
done

# The comparison, when both ran.
if [[ ${#targets[@]} == 2 && "${STORE:-sqlite}" != postgres ]]; then
  r="$BENCH_ROOT/bench/results"
  jq -n --slurpfile p "$r/zero-loss-pcrf.json" --slurpfile e "$r/zero-loss-echo.json" '
    ($p[0].result.zero_loss_tps) as $pz | ($e[0].result.zero_loss_tps) as $ez |
    { scenario: $p[0].scenario, machine: $p[0].machine,
      trial_duration_s: $p[0].duration_s, p99_bound_ms: $p[0].p99_bound_ms,
      pcrf: { zero_loss_tps: $pz, extreme_tps: $p[0].result.extreme_tps, limited_by_max: $p[0].result.limited_by_max },
      echo: { zero_loss_tps: $ez, extreme_tps: $e[0].result.extreme_tps, limited_by_max: $e[0].result.limited_by_max },
      ratio: (if $pz != null and $ez != null and $ez > 0 then ($pz / $ez) else null end) }' \
    >"$r/zero-loss.json"
  jq -r '"pcrf zero-loss \(.pcrf.zero_loss_tps // "none") TPS, echo \(.echo.zero_loss_tps // "none") TPS, ratio \(.ratio // "n/a")"' "$r/zero-loss.json"
fi
