#!/usr/bin/env bash
# The VoLTE call set-up scenario against `pcrf serve` (embedded store,
# durability full, the example policy): Gx attach, Rx AAR -> RAR -> RAA ->
# AAA, hold, STR, CCR-T, from emulated P-GWs and P-CSCFs, after provisioning
# the population through the REST API. RUNS short runs on one server; the
# figures to quote are the medians over the runs (see BENCHMARKS.md).
#
#   bench/volte.sh
#
# Environment: BUILD (1; 0 uses existing release binaries), CALLS (calls
# per second, 20), DURATION (10s), RUNS (3), PEERS (P-GWs, 2), SUBSCRIBERS
# (2000), SCENARIO (bench/scenarios/volte.toml).
# Writes bench/results/volte-<run>.json and prints each run's summary.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

case "${1:-}" in
  -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
  "") ;;
  *) die "unknown argument $1" ;;
esac
CALLS="${CALLS:-20}"
DURATION="${DURATION:-10s}"
RUNS="${RUNS:-3}"
PEERS="${PEERS:-2}"
SUBSCRIBERS="${SUBSCRIBERS:-2000}"
SCENARIO="${SCENARIO:-$BENCH_ROOT/bench/scenarios/volte.toml}"

build_release pcrf-bench pcrf
work="$(mktemp -d "${TMPDIR:-/tmp}/pcrf-bench.XXXXXX")"
trap 'stop_server; rm -rf "$work"' EXIT
# The scenario's AFs: af_peers P-CSCFs in af_realm.
realm="$(sed -n 's/^af_realm *= *"\(.*\)"/\1/p' "$SCENARIO")"
afs="$(sed -n 's/^af_peers *= *\([0-9]*\).*/\1/p' "$SCENARIO")"
hosts=()
for i in $(seq "${afs:-1}"); do hosts+=("pcscf-$i.${realm:-ims.test}"); done
start_pcrf "$work" "$PEERS" "${hosts[@]}"

for run in $(seq "$RUNS"); do
  out="$BENCH_ROOT/bench/results/volte-$run.json"
  args=(volte --scenario "$SCENARIO" --target "127.0.0.1:$DIAMETER_PORT"
        --peers "$PEERS" --subscribers "$SUBSCRIBERS" --seed "$run"
        --calls-per-second "$CALLS" --duration "$DURATION" --out "$out")
  # Provision once, before the first run.
  [[ $run == 1 ]] && args+=(--provision "$API_URL")
  "$BENCH_BIN" "${args[@]}"
  echo "report: $out"
done
