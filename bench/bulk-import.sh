#!/usr/bin/env bash
# Bulk provisioning benchmark: generates N subscribers (default 1,000,000)
# as CSV, starts a release `pcrf serve` on the embedded store (temporary
# data directory, free loopback ports, durability full), imports them with
# `pcrf subscribers import`, then restarts the server and measures how long
# it takes to come up with all of them recovered from the store. RUNS
# repetitions (default 3), each on a fresh data directory; prints each run
# and the medians.
#
#   bench/bulk-import.sh                 # build, 3 runs of 1,000,000
#   N=100000 RUNS=1 bench/bulk-import.sh
#   BUILD=0 bench/bulk-import.sh         # use target/release as it is
#
# Env: N, RUNS, BATCH (profiles per request, default 10000), KEEP=1 keeps
# the work directory.

set -euo pipefail
source "$(dirname "$0")/lib.sh"

N="${N:-1000000}"
RUNS="${RUNS:-3}"
BATCH="${BATCH:-10000}"
need curl curl
need awk gawk

build_release pcrf

WORK="$(mktemp -d "${TMPDIR:-/tmp}/pcrf-bulk-import.XXXXXX")"
cleanup() {
  stop_server
  if [[ "${KEEP:-0}" != 1 ]]; then rm -rf "$WORK"; else echo "kept $WORK" >&2; fi
}
trap cleanup EXIT

now() { date +%s.%N; }

# The subscribers: IMSI 00101 + 10 digits, MSISDN, a plan, a service on
# every tenth, a billing day, a monthly quota on every other one.
CSV="$WORK/subscribers.csv"
echo "generating $N subscribers in $CSV" >&2
awk -v n="$N" 'BEGIN {
  print "imsi,msisdn,plan,services,billing_day,quota.monthly"
  for (i = 0; i < n; i++) {
    plan = (i % 3 == 0) ? "gold" : "basic"
    svc = (i % 10 == 0) ? "vip;video-boost" : ""
    quota = (i % 2 == 0) ? 50000000000 : ""
    printf "00101%010d,4917%08d,%s,%s,%d,%s\n", i, i, plan, svc, i % 28 + 1, quota
  }
}' >"$CSV"
LAST_IMSI="$(printf '00101%010d' $((N - 1)))"
echo "$(wc -c <"$CSV") bytes" >&2

# wait_healthy URL SECONDS: polls /v1/health every 20 ms.
wait_healthy() {
  local deadline=$((SECONDS + $2))
  while ((SECONDS < deadline)); do
    if curl -fsS -o /dev/null "$1/v1/health" 2>/dev/null; then return 0; fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then return 1; fi
    sleep 0.02
  done
  return 1
}

import_s=() rate=() startup_s=()
for run in $(seq "$RUNS"); do
  dir="$WORK/run$run"
  mkdir -p "$dir"
  start_pcrf "$dir" 1
  t0="$(now)"
  "$PCRF_BIN" subscribers import "$CSV" --api "$API_URL" --batch "$BATCH" \
    >"$dir/import.out" 2>"$dir/import.err" \
    || die "import failed: $(tail -5 "$dir/import.err")"
  t1="$(now)"
  summary="$(cat "$dir/import.out")"
  grep -q "imported $N profiles ($N created, 0 updated)" <<<"$summary" \
    || die "unexpected import summary: $summary"
  stop_server

  # Restart on the same data: start-up is recovery of N subscribers.
  t2="$(now)"
  "$PCRF_BIN" serve --config "$dir/pcrf.toml" >"$dir/restart.out" 2>"$dir/restart.err" &
  SERVER_PID=$!
  wait_healthy "$API_URL" 600 || die "restart failed: $(tail -5 "$dir/restart.err")"
  t3="$(now)"
  code="$(curl -sS -o /dev/null -w '%{http_code}' "$API_URL/v1/subscribers/$LAST_IMSI")"
  [[ "$code" == 200 ]] || die "subscriber $LAST_IMSI not recovered (HTTP $code)"
  db_mb="$(du -sm "$dir/data" | cut -f1)"
  stop_server

  import_s+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')")
  rate+=("$(awk -v a="$t0" -v b="$t1" -v n="$N" 'BEGIN { printf "%.0f", n / (b - a) }')")
  startup_s+=("$(awk -v a="$t2" -v b="$t3" 'BEGIN { printf "%.2f", b - a }')")
  echo "run $run: import ${import_s[-1]} s (${rate[-1]} subscribers/s, client: $summary); start-up with $N recovered ${startup_s[-1]} s; store ${db_mb} MB"
  rm -rf "$dir/data"
done

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "median of $RUNS: import $(median "${import_s[@]}") s ($(median "${rate[@]}") subscribers/s), start-up $(median "${startup_s[@]}") s"
