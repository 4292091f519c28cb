#!/usr/bin/env bash
# A published commercial PCRF's benchmark, re-runnable: the seed scenario (CCR-I,
# CCR-U with Used-Service-Unit volumes, CCR-T) at 3000 TPS for 60 s against
# `pcrf serve` on the embedded store (durability full), after provisioning
# the population through the REST API. Reports the server's CPU % of one
# core and CPU µs per transaction, latency percentiles and Apdex per command.
#
#   bench/seed-scenario.sh            # against pcrf serve
#   bench/seed-scenario.sh --echo     # against pcrf-bench echo-server (the ceiling)
#   STORE=postgres bench/seed-scenario.sh   # pcrf serve on a throwaway PostgreSQL cluster
#
# With STORE=postgres the cluster runs on this machine (Debian's settings, or
# PG_CONF=deploy/postgresql.conf.sample) and the report adds its CPU (the
# postmaster and its children) beside the server's; COMMIT_WINDOW_US sets the
# group-commit window. The store's commits over the measured window are read
# from the server's /metrics either way. PROFILE=1 (postgres) provisions first,
# then switches the query profiler on for the run (warm-up included) and
# writes its top 15 statements to bench/results/seed-scenario-pcrf-postgres-queries.txt
# (the profiler's timing costs CPU: measure CPU in runs without it).
#
# Environment: BUILD (1; 0 uses existing release binaries), RATE (3000), DURATION (60s), WARMUP (the scenario's longest
# hold: 6s), PEERS (4), SUBSCRIBERS (20000), SCENARIO (bench/scenarios/seed.toml).
# Writes bench/results/seed-scenario-<pcrf|pcrf-postgres|echo>.json and prints the summary.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

kind=pcrf
for a in "$@"; do
  case "$a" in
    --echo) kind=echo ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) die "unknown argument $a (use --echo)" ;;
  esac
done
RATE="${RATE:-3000}"
DURATION="${DURATION:-60s}"
PEERS="${PEERS:-4}"
SUBSCRIBERS="${SUBSCRIBERS:-20000}"
SCENARIO="${SCENARIO:-$BENCH_ROOT/bench/scenarios/seed.toml}"

if [[ $kind == pcrf ]]; then build_release pcrf-bench pcrf; else build_release pcrf-bench; fi
work="$(mktemp -d "${TMPDIR:-/tmp}/pcrf-bench.XXXXXX")"
trap 'stop_server; stop_postgres; rm -rf "$work"' EXIT
[[ $kind == pcrf && "${STORE:-sqlite}" == postgres ]] && start_postgres
if [[ $kind == pcrf ]]; then start_pcrf "$work" "$PEERS"; else start_echo "$work"; fi

suffix="$kind"
[[ $kind == pcrf && "${STORE:-sqlite}" == postgres ]] && suffix="pcrf-postgres"
out="$BENCH_ROOT/bench/results/seed-scenario-$suffix.json"
args=(run --scenario "$SCENARIO" --target "127.0.0.1:$DIAMETER_PORT"
      --peers "$PEERS" --subscribers "$SUBSCRIBERS"
      --rate "$RATE" --duration "$DURATION" --server-pid "$SERVER_PID" --out "$out")
[[ -n "${WARMUP:-}" ]] && args+=(--warmup "$WARMUP")
[[ -n "$API_URL" ]] && args+=(--server-metrics "$API_URL/metrics")
if [[ "${PROFILE:-0}" == 1 ]]; then
  [[ -n "$PG_TMP" ]] || die "PROFILE=1 needs STORE=postgres"
  "$BIN/pcrf-bench" provision --scenario "$SCENARIO" --api "$API_URL" --subscribers "$SUBSCRIBERS" >&2
  "$BIN/pcrf" debug --api "${API_URL#http://}" query-profiler on >&2
elif [[ -n "$API_URL" ]]; then
  args+=(--provision "$API_URL")
fi
if [[ -n "$PG_TMP" ]]; then
  # The PCRF's backend exists once it has connected, which it does at start.
  for p in $(postgres_pids); do args+=(--db-pid "$p"); done
fi
"$BIN/pcrf-bench" "${args[@]}"
echo "report: $out"
if [[ "${PROFILE:-0}" == 1 ]]; then
  "$BIN/pcrf" debug --api "${API_URL#http://}" queries --top 15 \
    | tee "$BENCH_ROOT/bench/results/seed-scenario-pcrf-postgres-queries.txt"
fi
