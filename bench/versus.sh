#!/usr/bin/env bash
# `pcrf serve` side by side with another Gx PCRF, on this machine, in one
# sitting: the comparison an operator repeats before choosing. The same
# generator (pcrf-bench), the same seed scenario and the same measurements
# go to three servers in turn:
#
#   pcrf    `pcrf serve` on the embedded store, durability full (every change
#           on disk before its answer), the example policy and usage file;
#   echo    `pcrf-bench echo-server`: a fixed CCA at once, the ceiling of the
#           generator and the transport on this machine;
#   other   the PCRF under comparison, which you start and provision first.
#
# For each of RUNS rounds, in turn for the three: the seed scenario
# (bench/scenarios/seed.toml) at each rate of RATES for DURATION after its
# warm-up, then the zero-loss search (bench/scenarios/seed-fast.toml, as
# bench/zero-loss.sh). Per run: the server's CPU per transaction (utime +
# stime of its processes from /proc at the window's edges, over the
# requests answered), p50 and p99 of all commands from each request's
# intended send time, Apdex (T = 5 ms), the share answered 2001, and VmRSS
# after the highest rate. Each figure is the median of the rounds (the
# rounds are listed beside it); the last column is pcrf / other.
#
# The other PCRF must:
#   - listen for Diameter Gx at OTHER_TARGET (host:port) over TCP and
#     accept the emulated P-GWs pgw-1.bench.test .. pgw-PEERS.bench.test
#     (realm bench.test) from this host; the generator sends the realm
#     OTHER_REALM names as Destination-Realm (default pcrf.test);
#   - know the SUBSCRIBERS subscribers: IMSIs 001010000000001 onwards,
#     MSISDNs 79000000001 onwards, APN "internet", and answer their CCRs
#     2001 (a subscriber it does not know makes every figure of it
#     meaningless: the report's share of 2001 says so);
#   - run as the processes OTHER_PID lists (comma-separated PIDs: their CPU
#     and memory are the figures; include its database if it has one).
#
# It is never started, stopped or written to by this script. Give it the
# same CPUs as `pcrf serve` (SERVER_CPUS pins ours; pin it yourself with
# taskset), and turn off Nagle's algorithm (TCP_NODELAY) in it if it can:
# the generator and our server both set it, and a 40 ms delayed ACK would
# otherwise measure Nagle, not the PCRF.
#
#   OTHER_TARGET=127.0.0.1:3868 OTHER_PID=$(pidof pcrfd) OTHER_NAME=open5gs bench/versus.sh
#   BUILD=0 RUNS=1 RATES=1000 DURATION=5s ZL_DURATION=2s OTHER_TARGET=... OTHER_PID=... bench/versus.sh
#
# Environment: OTHER_TARGET, OTHER_PID (required), OTHER_NAME (other), OTHER_REALM, BUILD, PCRF_BIN,
# BENCH_BIN, RUNS (3), RATES ("1000 3000"), DURATION (20s), SUBSCRIBERS (20000), PEERS (4), ZERO_LOSS (1),
# ZL_MIN (1000), ZL_DURATION (10s), P99_BOUND (10ms), SERVER_CPUS, GEN_CPUS.
# Writes bench/results/versus.md and the JSON reports under bench/results/versus/.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need jq jq
need awk gawk

for a in "$@"; do
  case "$a" in
    -h|--help) sed -n '2,48p' "$0"; exit 0 ;;
    *) die "unknown argument $a" ;;
  esac
done
[[ -n "${OTHER_TARGET:-}" && -n "${OTHER_PID:-}" ]] \
  || die "set OTHER_TARGET (host:port of the other PCRF) and OTHER_PID (its processes); --help says more"
for p in ${OTHER_PID//,/ }; do
  [[ -r "/proc/$p/stat" ]] || die "OTHER_PID: no process $p"
done
OTHER_NAME="${OTHER_NAME:-other}"
RUNS="${RUNS:-3}"
RATES="${RATES:-1000 3000}"
DURATION="${DURATION:-20s}"
SUBSCRIBERS="${SUBSCRIBERS:-20000}"
PEERS="${PEERS:-4}"
ZERO_LOSS="${ZERO_LOSS:-1}"
ZL_MIN="${ZL_MIN:-1000}"
# One population for every run: the other PCRF was provisioned with it.
export ZL_SUBSCRIBERS="$SUBSCRIBERS"
SEED="$BENCH_ROOT/bench/scenarios/seed.toml"

build_release pcrf-bench pcrf
set_pinning
work="$(mktemp -d "${TMPDIR:-/tmp}/pcrf-versus.XXXXXX")"
trap 'stop_server; rm -rf "$work"' EXIT
out="$BENCH_ROOT/bench/results/versus"
mkdir -p "$out"
kinds=(pcrf echo other)
top_rate="${RATES##* }"

# seed_run KIND RATE DIR: one seed run; the report in DIR/report.json and,
# after the highest rate, the server's VmRSS (KiB) in DIR/rss.txt.
seed_run() {
  local kind="$1" rate="$2" dir="$3" target scenario="$SEED" pids=() p args
  mkdir -p "$dir"
  args=(run --peers "$PEERS" --subscribers "$SUBSCRIBERS" --rate "$rate"
        --duration "$DURATION" --out "$dir/report.json")
  case "$kind" in
    pcrf) start_pcrf "$dir" "$PEERS"; target="127.0.0.1:$DIAMETER_PORT"; pids=("$SERVER_PID")
          args+=(--provision "$API_URL" --server-metrics "$API_URL/metrics") ;;
    echo) start_echo "$dir"; target="127.0.0.1:$DIAMETER_PORT"; pids=("$SERVER_PID") ;;
    other) target="$OTHER_TARGET"; read -r -a pids <<<"${OTHER_PID//,/ }"
           other_scenario "$SEED" >"$dir/scenario.toml"; scenario="$dir/scenario.toml" ;;
  esac
  for p in "${pids[@]}"; do args+=(--server-pid "$p"); done
  echo "== $kind at $rate TPS ==" >&2
  gen "${args[@]}" --scenario "$scenario" --target "$target" >"$dir/summary.txt" 2>&1 \
    || echo "seed run of $kind failed: $(tail -3 "$dir/summary.txt")" >&2
  if [[ "$rate" == "$top_rate" ]]; then
    sleep 1
    local kib=0
    for p in "${pids[@]}"; do kib=$((kib + $(rss_kib "$p"))); done
    echo "$kib" >"$dir/rss.txt"
  fi
  stop_server
  [[ -f "$dir/report.json" ]] && cp "$dir/report.json" "$out/$kind-$rate-$(basename "$(dirname "$dir")").json"
  return 0
}

declare -A V
add() { V[$1]+="$2 "; }
for r in $(seq "$RUNS"); do
  for rate in $RATES; do
    for k in "${kinds[@]}"; do
      d="$work/$r/$k-$rate"
      seed_run "$k" "$rate" "$d"
      add "$k,cpu,$rate" "$(field "$d" '.server_cpu.cpu_us_per_txn' 10)"
      add "$k,p50,$rate" "$(field "$d" '.total.latency.p50_ms' 100)"
      add "$k,p99,$rate" "$(field "$d" '.total.latency.p99_ms' 100)"
      add "$k,apdex,$rate" "$(field "$d" '.total.apdex.score' 1000)"
      add "$k,ok,$rate" "$(field "$d" '(.total.results["2001"] // 0) / .total.sent * 100' 100)"
      if [[ -f "$d/rss.txt" ]]; then add "$k,rss" "$(calc "$(cat "$d/rss.txt") / 1024" 1)"; fi
    done
  done
  if [[ "$ZERO_LOSS" == 1 ]]; then
    for k in "${kinds[@]}"; do
      zero_loss_search "$k" "$work/$r/zl-$k" "$ZL_MIN"
      add "$k,zl" "$FOUND"
      cp "$work/$r/zl-$k/report.json" "$out/zero-loss-$k-$r.json" 2>/dev/null || true
    done
  fi
done

{
  echo "# \`pcrf serve\` beside $OTHER_NAME"
  echo
  echo "bench/versus.sh, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)),"
  echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end. Seed scenario, $PEERS P-GWs, $SUBSCRIBERS subscribers,"
  echo "$DURATION per run; medians of $RUNS rounds [the rounds]; \`pcrf serve\` on the embedded store, durability full."
  echo
  echo "| | echo server | \`pcrf serve\` | $OTHER_NAME | pcrf / $OTHER_NAME |"
  echo "|---|---:|---:|---:|---:|"
} >"$work/table.md"
# row LABEL KEY: the medians of echo, pcrf and other with their rounds,
# and pcrf / other.
row() {
  local label="$1" key="$2" k m cells=() pm="" om=""
  for k in echo pcrf other; do
    # shellcheck disable=SC2086
    m="$(median ${V[$k,$key]:-})"
    [[ $k == pcrf ]] && pm="$m"
    [[ $k == other ]] && om="$m"
    # shellcheck disable=SC2086
    cells+=("$m [$(runs ${V[$k,$key]:-n/a})]")
  done
  echo "| $label | ${cells[0]} | ${cells[1]} | ${cells[2]} | $(calc "$pm / $om") |"
}
{
  for rate in $RATES; do
    row "CPU per transaction at $rate TPS (µs)" "cpu,$rate"
    row "p50 at $rate TPS (ms)" "p50,$rate"
    row "p99 at $rate TPS (ms)" "p99,$rate"
    row "Apdex (T = 5 ms) at $rate TPS" "apdex,$rate"
    row "answered 2001 at $rate TPS (%)" "ok,$rate"
  done
  [[ "$ZERO_LOSS" == 1 ]] && row "zero-loss TPS (p99 <= ${P99_BOUND:-10ms}, seed-fast)" zl
  row "VmRSS after the $top_rate TPS run (MiB)" rss
} >>"$work/table.md"
cp "$work/table.md" "$BENCH_ROOT/bench/results/versus.md"
cat "$work/table.md"
