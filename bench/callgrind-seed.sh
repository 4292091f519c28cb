#!/usr/bin/env bash
# Instructions per transaction of `pcrf serve` on the seed scenario, under
# callgrind (repeatable where wall-clock CPU on a shared machine is not).
# The server runs under `valgrind --tool=callgrind`; the population is
# provisioned through the API, the counters are zeroed, the scenario runs
# at a low rate (callgrind is ~50x slower), then the counters are dumped.
# Prints Ir, Gx requests answered and Ir per request; the profile
# (callgrind_annotate it) is left in the work directory.
#
#   bench/callgrind-seed.sh                      # embedded store
#   STORE=postgres DATABASE_URL=postgres://postgres@127.0.0.1:5432/mydb bench/callgrind-seed.sh
#
# Env: BUILD (1; 0 uses existing release binaries), RATE (50), DURATION (20s),
# SUBSCRIBERS (2000), STORE (sqlite|postgres), DATABASE_URL (postgres: its
# public schema is dropped and recreated), WORK (a directory to keep).
# Builds with line-table debug info so the profile names source lines.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need valgrind valgrind
need curl curl
RATE="${RATE:-50}"
DURATION="${DURATION:-20s}"
SUBSCRIBERS="${SUBSCRIBERS:-2000}"
STORE="${STORE:-sqlite}"
CARGO_PROFILE_RELEASE_DEBUG=line-tables-only build_release pcrf-bench pcrf
work="${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/pcrf-callgrind.XXXXXX")}"
mkdir -p "$work"
dport="$(free_port)"
aport="$(free_port)"
if [[ $STORE == postgres ]]; then
  need psql postgresql-client
  [[ -n "${DATABASE_URL:-}" ]] || die "STORE=postgres needs DATABASE_URL"
  psql -q "$DATABASE_URL" -c 'drop schema public cascade; create schema public;' >/dev/null
  store="$(postgres_store_section "$DATABASE_URL")"
else
  store="$(sqlite_store_section "$work/data")"
fi
pcrf_config "$dport" "$aport" "$store" pgw-1.bench.test pgw-2.bench.test >"$work/pcrf.toml"
valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out" --dump-instr=no \
  --compress-strings=no --compress-pos=no \
  "$PCRF_BIN" serve --config "$work/pcrf.toml" >"$work/pcrf.out" 2>"$work/pcrf.err" &
SERVER_PID=$!
trap 'stop_server' EXIT
wait_port "$dport" 120 && wait_port "$aport" 60 || die "pcrf serve did not start: $(tail -5 "$work/pcrf.err")"
"$BENCH_BIN" provision --scenario "$BENCH_ROOT/bench/scenarios/seed.toml" \
  --subscribers "$SUBSCRIBERS" --api "http://127.0.0.1:$aport" >"$work/provision.out"
callgrind_control -z "$SERVER_PID" >/dev/null
"$BENCH_BIN" run --scenario "$BENCH_ROOT/bench/scenarios/seed.toml" \
  --target "127.0.0.1:$dport" --peers 2 --subscribers "$SUBSCRIBERS" \
  --rate "$RATE" --duration "$DURATION" --warmup 0s --timeout 10s \
  --out "$work/report.json" 2>"$work/run.err" >/dev/null || true
sleep 1
curl -sS "http://127.0.0.1:$aport/metrics" >"$work/metrics.txt"
callgrind_control -d "$SERVER_PID" >/dev/null
sleep 1
profile="$(ls -t "$work"/callgrind.out.* | head -1)"
ir="$(sed -n 's/^summary: //p' "$profile")"
answered="$(awk '/^pcrf_requests_total\{command="CCR-[IUT]"/ {n += $2} END {print n + 0}' "$work/metrics.txt")"
echo "Ir $ir, Gx requests answered $answered, Ir per request $((ir / (answered > 0 ? answered : 1)))"
grep -E '^pcrf_(requests_total|policy_runs_total|policy_skips_total|policy_skips_within_bounds_total|store_batches_total)' "$work/metrics.txt"
echo "profile: $profile (callgrind_annotate --inclusive=yes $profile)"
