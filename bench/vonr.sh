#!/usr/bin/env bash
# VoNR beside VoLTE on one server: the same calls over N7 + N5 (`pcrf-bench
# vonr`: an emulated SMF's PDU session, a P-CSCF's N5 app session with one
# voice component; CALL-SETUP until the SMF emulator is pushed the voice
# rule) and over Gx + Rx (`pcrf-bench volte`: CCR-I, AAR -> RAR -> RAA ->
# AAA; CALL-SETUP until the AAA), against one `pcrf serve` (embedded store,
# durability full, the example policy and usage file, [sbi] on), alternated
# RUNS times at CALLS calls per second for DURATION. The server's CPU over
# each run is read from /proc here, for both models alike. Prints each run,
# then the medians.
#
#   bench/vonr.sh                 # CALLS=100 DURATION=10s RUNS=3
#
# Environment: BUILD (1; 0 uses existing release binaries), PCRF_BIN and
# BENCH_BIN, CALLS, DURATION, RUNS, PEERS (P-GWs and SMF connections, 2),
# SUBSCRIBERS (5000), SCENARIO (bench/scenarios/volte.toml: the call's
# media, hold time and call_after serve both models).
# Writes bench/results/vonr-{volte,vonr}-<i>.json and bench/results/vonr.md.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need python3 python3

case "${1:-}" in
  -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
  "") ;;
  *) die "unknown argument $1" ;;
esac
CALLS="${CALLS:-100}"
DURATION="${DURATION:-10s}"
RUNS="${RUNS:-3}"
PEERS="${PEERS:-2}"
SUBSCRIBERS="${SUBSCRIBERS:-5000}"
SCENARIO="${SCENARIO:-$BENCH_ROOT/bench/scenarios/volte.toml}"

build_release pcrf-bench pcrf
work="$(mktemp -d "${TMPDIR:-/tmp}/pcrf-vonr.XXXXXX")"
trap 'stop_server; rm -rf "$work"' EXIT
realm="$(sed -n 's/^af_realm *= *"\(.*\)"/\1/p' "$SCENARIO")"
afs="$(sed -n 's/^af_peers *= *\([0-9]*\).*/\1/p' "$SCENARIO")"
hosts=()
for i in $(seq "${afs:-1}"); do hosts+=("pcscf-$i.${realm:-ims.test}"); done
sbi_port="$(free_port)"
printf '[sbi]\nlisten = "127.0.0.1:%s"\n' "$sbi_port" >"$work/sbi.toml"
mkdir -p "$work/pcrf"
PCRF_EXTRA_CONFIG="$work/sbi.toml" start_pcrf "$work/pcrf" "$PEERS" "${hosts[@]}"
wait_port "$sbi_port" 10 || die "the SBI listener did not start: $(tail -20 "$work/pcrf/pcrf.err")"
gen provision --scenario "$SCENARIO" --api "$API_URL" --subscribers "$SUBSCRIBERS" >&2

# The server's CPU ticks (user + system) so far.
ticks() { awk '{print $14 + $15}' "/proc/$SERVER_PID/stat"; }
results="$BENCH_ROOT/bench/results"
mkdir -p "$results"
common=(--scenario "$SCENARIO" --peers "$PEERS" --subscribers "$SUBSCRIBERS"
        --calls-per-second "$CALLS" --duration "$DURATION")
for i in $(seq "$RUNS"); do
  for model in volte vonr; do
    echo "== run $i: $model ==" >&2
    out="$results/vonr-$model-$i.json"
    before="$(ticks)"; t0="$(date +%s.%N)"
    if [[ $model == volte ]]; then
      gen volte "${common[@]}" --seed "$i" --target "127.0.0.1:$DIAMETER_PORT" --out "$out" >&2
    else
      gen vonr "${common[@]}" --seed "$i" --sbi "127.0.0.1:$sbi_port" --out "$out" >&2
    fi
    after="$(ticks)"; t1="$(date +%s.%N)"
    echo "$before $after $t0 $t1 $(getconf CLK_TCK)" >"$work/cpu-$model-$i"
    sleep 2
  done
done

python3 - "$results" "$work" "$RUNS" "$CALLS" "$DURATION" <<'PY' | tee "$results/vonr.md"
import json, statistics, sys
results, work, runs, calls, duration = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
rows = {"volte": [], "vonr": []}
for i in range(1, runs + 1):
    for m in rows:
        r = json.load(open(f"{results}/vonr-{m}-{i}.json"))
        b, a, t0, t1, tck = open(f"{work}/cpu-{m}-{i}").read().split()
        cpu_s = (float(a) - float(b)) / float(tck)
        wall = float(t1) - float(t0)
        if m == "volte":
            setup = next(c for c in r["commands"] if c["command"] == "CALL-SETUP")["latency"]
            done, failed = r["calls"]["completed"], r["calls"]["failed"]
        else:
            setup = next(s for s in r["steps"] if s["step"] == "CALL-SETUP")["latency"]
            done, failed = r["calls"]["completed"], r["calls"]["failed"]
        rows[m].append((setup["p50_ms"], setup["p99_ms"], done, failed,
                        100 * cpu_s / wall, 1e6 * cpu_s / max(done, 1)))
print(f"VoNR beside VoLTE, {calls} calls/s for {duration}, {runs} alternated runs each")
print()
print("| | set-up p50 ms | set-up p99 ms | completed | failed | server CPU % | CPU µs/call |")
print("|---|---:|---:|---:|---:|---:|---:|")
med = {}
for m in rows:
    for i, r in enumerate(rows[m], 1):
        print(f"| {m} run {i} | {r[0]:.2f} | {r[1]:.2f} | {r[2]} | {r[3]} | {r[4]:.1f} | {r[5]:.0f} |")
    med[m] = [statistics.median(r[j] for r in rows[m]) for j in range(6)]
for m in rows:
    x = med[m]
    print(f"| **{m} median** | {x[0]:.2f} | {x[1]:.2f} | {x[2]:.0f} | {x[3]:.0f} | {x[4]:.1f} | {x[5]:.0f} |")
print()
print(f"ratio VoNR/VoLTE: CPU per call {med['vonr'][5] / med['volte'][5]:.2f}, "
      f"set-up p50 {med['vonr'][0] / med['volte'][0]:.2f}, p99 {med['vonr'][1] / med['volte'][1]:.2f}")
PY
