#!/usr/bin/env bash
# N7 beside Gx on one server, in one run: the seed scenario over Gx
# (`pcrf-bench run`: CCR-I, CCR-U with usage, CCR-T from emulated P-GWs)
# and its N7 twin (`pcrf-bench n7`: Create, Updates with accuUsageReports,
# Delete from emulated SMFs over HTTP/2) against the same `pcrf serve`
# (embedded store, durability full, the example policy and usage file,
# [sbi] on), alternated RUNS times, each at RATE requests per second for
# DURATION after the scenario's warm-up. Prints each run, then the medians
# of the server's CPU per transaction and of p50/p99, and the ratio N7/Gx.
#
#   bench/n7-twin.sh                  # RATE=1000 DURATION=20s RUNS=3
#   RATE=3000 bench/n7-twin.sh
#
# With ZERO_LOSS=1 it then searches, for each interface on the same
# server, the highest rate held with no failure, p99 <= P99_MS (10) and at
# least 90% of the offered rate achieved in the window: doubling from ZL_MIN (500) up to
# ZL_MAX (16000), then halving the bracket down to 5% (ZL_DURATION 10s a
# trial), and prints both and their ratio.
#
# Environment: BUILD (1; 0 uses existing release binaries), PCRF_BIN and
# BENCH_BIN, RATE, DURATION, RUNS, PEERS (4: P-GWs, and as many SMF
# connections), SUBSCRIBERS (20000), SCENARIO (bench/scenarios/seed.toml),
# SERVER_CPUS and GEN_CPUS (see bench/lib.sh).
# Writes bench/results/n7-twin-{gx,n7}-<i>.json and bench/results/n7-twin.md.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need python3 python3

RATE="${RATE:-1000}"
DURATION="${DURATION:-20s}"
RUNS="${RUNS:-3}"
PEERS="${PEERS:-4}"
SUBSCRIBERS="${SUBSCRIBERS:-20000}"
SCENARIO="${SCENARIO:-$BENCH_ROOT/bench/scenarios/seed.toml}"

build_release pcrf-bench pcrf
set_pinning
work="$(mktemp -d "${TMPDIR:-/tmp}/pcrf-n7-twin.XXXXXX")"
trap 'stop_server; rm -rf "$work"' EXIT
sbi_port="$(free_port)"
printf '[sbi]\nlisten = "127.0.0.1:%s"\n' "$sbi_port" >"$work/sbi.toml"
mkdir -p "$work/pcrf"
PCRF_EXTRA_CONFIG="$work/sbi.toml" start_pcrf "$work/pcrf" "$PEERS"
wait_port "$sbi_port" 10 || die "the SBI listener did not start: $(tail -20 "$work/pcrf/pcrf.err")"
gen provision --scenario "$SCENARIO" --api "$API_URL" --subscribers "$SUBSCRIBERS" >&2

results="$BENCH_ROOT/bench/results"
mkdir -p "$results"
common=(--scenario "$SCENARIO" --peers "$PEERS" --subscribers "$SUBSCRIBERS"
        --rate "$RATE" --duration "$DURATION" --server-pid "$SERVER_PID")
for i in $(seq "$RUNS"); do
  echo "== run $i: Gx ==" >&2
  gen run "${common[@]}" --target "127.0.0.1:$DIAMETER_PORT" --out "$results/n7-twin-gx-$i.json" >&2
  echo "== run $i: N7 ==" >&2
  gen n7 "${common[@]}" --sbi "127.0.0.1:$sbi_port" --out "$results/n7-twin-n7-$i.json" >&2
done

((RUNS > 0)) && python3 - "$results" "$RUNS" "$RATE" "$DURATION" <<'PY' | tee "$results/n7-twin.md"
import json, statistics, sys
results, runs, rate, duration = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = {"gx": [], "n7": []}
for i in range(1, runs + 1):
    g = json.load(open(f"{results}/n7-twin-gx-{i}.json"))
    n = json.load(open(f"{results}/n7-twin-n7-{i}.json"))
    rows["gx"].append((g["server_cpu"]["cpu_us_per_txn"], g["total"]["latency"]["p50_ms"],
                       g["total"]["latency"]["p99_ms"], g["achieved_tps"],
                       g["total"]["sent"] - g["total"]["succeeded"]))
    failed = sum(op["failed"] for op in n["operations"])
    rows["n7"].append((n["server_cpu"]["cpu_us_per_txn"], n["all"]["p50_ms"],
                       n["all"]["p99_ms"], n["achieved_rate"], failed))
print(f"N7 beside Gx, seed scenario at {rate}/s for {duration}, {runs} alternated runs each")
print()
print("| | CPU µs/txn | p50 ms | p99 ms | achieved/s | failed |")
print("|---|---:|---:|---:|---:|---:|")
med = {}
for k in ("gx", "n7"):
    for i, r in enumerate(rows[k], 1):
        print(f"| {k} run {i} | {r[0]:.0f} | {r[1]:.2f} | {r[2]:.2f} | {r[3]:.0f} | {r[4]} |")
    med[k] = [statistics.median(r[j] for r in rows[k]) for j in range(4)]
for k in ("gx", "n7"):
    m = med[k]
    print(f"| **{k} median** | {m[0]:.0f} | {m[1]:.2f} | {m[2]:.2f} | {m[3]:.0f} | |")
print()
print(f"ratio N7/Gx: CPU per transaction {med['n7'][0] / med['gx'][0]:.2f}, "
      f"p99 {med['n7'][2] / med['gx'][2]:.2f}")
PY

[[ "${ZERO_LOSS:-0}" == 1 ]] || exit 0
P99_MS="${P99_MS:-10}"
ZL_MIN="${ZL_MIN:-500}"
ZL_MAX="${ZL_MAX:-16000}"
ZL_DURATION="${ZL_DURATION:-10s}"
zl_common=(--scenario "$SCENARIO" --peers "$PEERS" --subscribers "$SUBSCRIBERS"
           --duration "$ZL_DURATION" --server-pid "$SERVER_PID")
# trial KIND RATE: 0 when the rate was held.
trial() {
  local kind="$1" rate="$2" out="$work/zl-$1-$2.json"
  if [[ $kind == gx ]]; then
    gen run "${zl_common[@]}" --rate "$rate" --target "127.0.0.1:$DIAMETER_PORT" --out "$out" >/dev/null 2>&1 || return 1
  else
    gen n7 "${zl_common[@]}" --rate "$rate" --sbi "127.0.0.1:$sbi_port" --out "$out" >/dev/null 2>&1 || return 1
  fi
  python3 - "$kind" "$out" "$rate" "$P99_MS" <<'PY'
import json, sys
kind, path, rate, bound = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
r = json.load(open(path))
if kind == "gx":
    p99, failed, achieved = r["total"]["latency"]["p99_ms"], r["total"]["sent"] - r["total"]["succeeded"], r["achieved_tps"]
else:
    p99, failed, achieved = r["all"]["p99_ms"], sum(o["failed"] for o in r["operations"]), r["achieved_rate"]
# Poisson arrivals put a 10 s window's count a few percent either side
# of the rate: 90% tells a generator or server that fell behind from that.
ok = failed == 0 and p99 <= bound and achieved >= 0.9 * rate
print(f"  {kind} {rate:.0f}/s: p99 {p99:.2f} ms, failed {failed}, achieved {achieved:.0f}/s -> {'held' if ok else 'not held'}", file=sys.stderr)
sys.exit(0 if ok else 1)
PY
}
search() {
  local kind="$1" lo=0 hi rate="$ZL_MIN"
  while ((rate <= ZL_MAX)); do
    if trial "$kind" "$rate"; then lo=$rate; rate=$((rate * 2)); else break; fi
    sleep 3
  done
  hi=$rate
  ((lo == 0)) && { echo 0; return; }
  while (( (hi - lo) * 20 > lo )); do
    rate=$(((lo + hi) / 2))
    sleep 3
    if trial "$kind" "$rate"; then lo=$rate; else hi=$rate; fi
  done
  echo "$lo"
}
echo "== zero-loss search (p99 <= $P99_MS ms, no failure) ==" >&2
# One trial of each first, not counted: the store and the caches settle
# after provisioning (a first trial's p99 came out four times the next's).
trial gx "$ZL_MIN" || true
trial n7 "$ZL_MIN" || true
gx_zl="$(search gx)"
n7_zl="$(search n7)"
echo "zero-loss: Gx $gx_zl/s, N7 $n7_zl/s, ratio N7/Gx $(ratio "$n7_zl" "$gx_zl")" | tee "$results/n7-twin-zero-loss.md"
