#!/usr/bin/env bash
# A published commercial PCRF's benchmark, re-runnable: the seed scenario (CCR-I,
# CCR-U with Used-Service-Unit volumes, CCR-T) at 3000 TPS for 60 s against
# `pcrf serve` on the embedded store (durability full), after provisioning
# the population through the REST API. Reports the server's CPU % of one
# core and CPU µs per transaction, latency percentiles and Apdex per command.
#
#   bench/seed-scenario.sh            # against pcrf serve, then the echo server, and their ratio
#   bench/seed-scenario.sh --echo     # against pcrf-bench echo-server (the ceiling) only
#   STORE=postgres bench/seed-scenario.sh   # pcrf serve on a throwaway PostgreSQL cluster
#
# With STORE=postgres the cluster runs on this machine (Debian's settings, or
# PG_CONF=deploy/postgresql.conf.sample) and the report adds its CPU (the
# postmaster and its children) beside the server's; COMMIT_WINDOW_US sets the
# group-commit window, WRITERS the store's shards and writers, DURABILITY
# the embedded store's durability (full unless set). The store's commits over the measured window are read
# from the server's /metrics either way. PROFILE=1 (postgres) provisions first,
# then switches the query profiler on for the run (warm-up included) and
# writes its top 15 statements to bench/results/seed-scenario-pcrf-postgres-queries.txt
# (the profiler's timing costs CPU: measure CPU in runs without it).
#
# The echo server runs right after pcrf serve with the same load and the
# same pinning, and "ratio pcrf/echo" is printed for the achieved TPS and
# the server's CPU per transaction (ECHO=0 skips it).
#
# SERIES=DIR also writes latency over time, one CSV per server (DIR/seed-<kind>.csv, a row every
# SERIES_EVERY, 100ms by default: requests, p50/p99/max, the server's RSS), where a whole run's
# percentiles would hide how often and how long the latency spikes are.
#
# Environment: BUILD (1; 0 uses existing release binaries), PCRF_BIN and BENCH_BIN (prebuilt binaries), RATE (3000),
# DURATION (60s), WARMUP (the scenario's longest hold: 6s), PEERS (4), SUBSCRIBERS (20000), SCENARIO
# (bench/scenarios/seed.toml), ECHO (1), SERVER_CPUS and GEN_CPUS (taskset lists; default on more than 2 CPUs: the
# first half for the server, the rest for the generator; see bench/lib.sh).
# Writes bench/results/seed-scenario-<pcrf|pcrf-postgres|echo>.json and prints the summary.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

kind=pcrf
for a in "$@"; do
  case "$a" in
    --echo) kind=echo ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) die "unknown argument $a (use --echo)" ;;
  esac
done
RATE="${RATE:-3000}"
DURATION="${DURATION:-60s}"
PEERS="${PEERS:-4}"
SUBSCRIBERS="${SUBSCRIBERS:-20000}"
SCENARIO="${SCENARIO:-$BENCH_ROOT/bench/scenarios/seed.toml}"
ECHO="${ECHO:-1}"

targets=("$kind")
[[ $kind == pcrf && "$ECHO" == 1 ]] && targets+=(echo)
if [[ $kind == pcrf ]]; then build_release pcrf-bench pcrf; else build_release pcrf-bench; fi
set_pinning
work="$(mktemp -d "${TMPDIR:-/tmp}/pcrf-bench.XXXXXX")"
trap 'stop_server; stop_postgres; rm -rf "$work"' EXIT

# run_one KIND: one run against pcrf serve or the echo server; its summary
# is printed and kept in $work/KIND.txt.
run_one() {
  local kind="$1" suffix out args p
  mkdir -p "$work/$kind"
  [[ $kind == pcrf && "${STORE:-sqlite}" == postgres ]] && start_postgres
  if [[ $kind == pcrf ]]; then start_pcrf "$work/$kind" "$PEERS"; else start_echo "$work/$kind"; fi
  suffix="$kind"
  [[ $kind == pcrf && "${STORE:-sqlite}" == postgres ]] && suffix="pcrf-postgres"
  out="$BENCH_ROOT/bench/results/seed-scenario-$suffix.json"
  args=(run --scenario "$SCENARIO" --target "127.0.0.1:$DIAMETER_PORT"
        --peers "$PEERS" --subscribers "$SUBSCRIBERS"
        --rate "$RATE" --duration "$DURATION" --server-pid "$SERVER_PID" --out "$out")
  [[ -n "${WARMUP:-}" ]] && args+=(--warmup "$WARMUP")
  if [[ -n "${SERIES:-}" ]]; then
    mkdir -p "$SERIES"
    args+=(--series "$SERIES/seed-$suffix.csv" --series-every "${SERIES_EVERY:-100ms}")
  fi
  [[ -n "$API_URL" ]] && args+=(--server-metrics "$API_URL/metrics")
  if [[ "${PROFILE:-0}" == 1 && $kind == pcrf ]]; then
    [[ -n "$PG_TMP" ]] || die "PROFILE=1 needs STORE=postgres"
    gen provision --scenario "$SCENARIO" --api "$API_URL" --subscribers "$SUBSCRIBERS" >&2
    "$PCRF_BIN" debug --api "${API_URL#http://}" query-profiler on >&2
  elif [[ -n "$API_URL" ]]; then
    args+=(--provision "$API_URL")
  fi
  if [[ -n "$PG_TMP" ]]; then
    # The PCRF's backend exists once it has connected, which it does at start.
    for p in $(postgres_pids); do args+=(--db-pid "$p"); done
  fi
  echo "== $kind ==" >&2
  gen "${args[@]}" | tee "$work/$kind.txt"
  echo "report: $out"
  if [[ -n "${SERIES:-}" ]]; then
    # p99_ms is the 9th column; the first rows (warm-up) have no requests.
    awk -F, 'NR > 1 && $2 > 0 { n++; if ($9 > 5) s++ } END { printf "series: %d of %d windows with p99 > 5 ms\n", s, n }' \
      "$SERIES/seed-$suffix.csv" | tee -a "$work/$kind.txt"
  fi
  if [[ "${PROFILE:-0}" == 1 && $kind == pcrf ]]; then
    "$PCRF_BIN" debug --api "${API_URL#http://}" queries --top 15 \
      | tee "$BENCH_ROOT/bench/results/seed-scenario-pcrf-postgres-queries.txt"
  fi
  stop_server
  stop_postgres
}

for t in "${targets[@]}"; do run_one "$t"; done

# The ratio to the echo server, from the two summaries.
if [[ ${#targets[@]} == 2 ]]; then
  tps() { sed -n 's/^achieved: \([0-9.]*\) TPS$/\1/p' "$work/$1.txt"; }
  cpu() { sed -n 's/^server CPU .*, \([0-9.]*\) µs\/txn.*/\1/p' "$work/$1.txt"; }
  echo "ratio pcrf/echo: TPS $(ratio "$(tps pcrf)" "$(tps echo)"), server CPU per transaction $(ratio "$(cpu pcrf)" "$(cpu echo)") ($(cpu pcrf) / $(cpu echo) µs)"
fi
