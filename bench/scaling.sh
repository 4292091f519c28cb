#!/usr/bin/env bash
# Core scaling: the zero-loss throughput of the seed-fast scenario with the
# server pinned to 1, 2, 4 and 8 cores (those the machine has, keeping at
# least one core for the generator, which gets all the others), against
# `pcrf serve` (embedded store, durability full) and against the echo
# server (the ceiling of generator + transport), side by side. Prints a
# markdown table and writes it to bench/results/scaling.md.
#
#   bench/scaling.sh
#   BUILD=0 PCRF_BIN=/path/pcrf BENCH_BIN=/path/pcrf-bench bench/scaling.sh   # prebuilt release binaries
#   CORES="1 2" bench/scaling.sh                                               # some rows only
#
# Needs only the two binaries, bash, coreutils, sed and taskset (no cargo with
# BUILD=0 or PCRF_BIN/BENCH_BIN, no jq, no python). The searches are short
# (trials of 2 s after 1 s of warm-up) so the whole table takes about 6-8
# minutes on 16 cores: each pcrf search starts from 0.9 of the figure on
# fewer cores, each echo search from pcrf's figure on the same cores, and a
# search that would start after BUDGET seconds is skipped.
#
# Environment: BUILD (1), PCRF_BIN, BENCH_BIN, CORES ("1 2 4 8"), MIN (2000, the first row's start), MAX (400000),
# DURATION (2s), WARMUP (1s), P99_BOUND (10ms), MAX_TRIALS (7), RESOLUTION (0.05), PAUSE (1s), RECOVERY (3s),
# PEERS (4), SUBSCRIBERS (100000), BUDGET (seconds, 400), TARGETS ("pcrf echo").
set -euo pipefail
source "$(dirname "$0")/lib.sh"

for a in "$@"; do
  case "$a" in
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) die "unknown argument $a" ;;
  esac
done
CORES="${CORES:-1 2 4 8}"
MIN="${MIN:-2000}"
MAX="${MAX:-400000}"
DURATION="${DURATION:-2s}"
WARMUP="${WARMUP:-1s}"
P99_BOUND="${P99_BOUND:-10ms}"
MAX_TRIALS="${MAX_TRIALS:-7}"
RESOLUTION="${RESOLUTION:-0.05}"
PAUSE="${PAUSE:-1s}"
RECOVERY="${RECOVERY:-3s}"
PEERS="${PEERS:-4}"
SUBSCRIBERS="${SUBSCRIBERS:-100000}"
BUDGET="${BUDGET:-400}"
TARGETS="${TARGETS:-pcrf echo}"
SCENARIO="$BENCH_ROOT/bench/scenarios/seed-fast.toml"

build_release pcrf-bench pcrf
need taskset util-linux
work="$(mktemp -d "${TMPDIR:-/tmp}/pcrf-scaling.XXXXXX")"
trap 'stop_server; rm -rf "$work"' EXIT

n="$(nproc)"
# The rows: server cores k with at least one core left for the generator;
# on a 1-CPU machine, one unpinned row.
rows=()
for k in $CORES; do
  ((k >= 1 && k < n)) && rows+=("$k")
done
((${#rows[@]} > 0)) || rows=(0)

# cpu_range FIRST LAST: a taskset list ("3" or "0-3").
cpu_range() { if (($1 == $2)); then echo "$1"; else echo "$1-$2"; fi; }

# search KIND K START: sets FOUND to the zero-loss TPS of KIND (pcrf or
# echo) with the server on K cores (0: unpinned), "none" when no trial
# passed.
search() {
  local kind="$1" k="$2" start="$3" dir
  if ((k == 0)); then set_pinning all all; else set_pinning "$(cpu_range 0 $((k - 1)))" "$(cpu_range "$k" $((n - 1)))"; fi
  dir="$work/$kind-$k"
  mkdir -p "$dir"
  if [[ $kind == pcrf ]]; then start_pcrf "$dir" "$PEERS"; else start_echo "$dir"; fi
  local args=(zero-loss --scenario "$SCENARIO" --target "127.0.0.1:$DIAMETER_PORT"
    --peers "$PEERS" --subscribers "$SUBSCRIBERS"
    --min "$start" --max "$MAX" --duration "$DURATION" --warmup "$WARMUP"
    --p99-bound "$P99_BOUND" --max-trials "$MAX_TRIALS" --resolution "$RESOLUTION"
    --pause "$PAUSE" --recovery "$RECOVERY" --server-pid "$SERVER_PID" --out "$dir/report.json")
  [[ -n "$API_URL" ]] && args+=(--provision "$API_URL")
  echo "== $kind, server on $k cores, search from $start TPS ==" >&2
  if ! gen "${args[@]}" >"$dir/summary.txt"; then
    echo "$kind on $k cores: the search failed" >&2
  fi
  stop_server
  FOUND="$(sed -n 's/^zero-loss: \([0-9]*\) TPS.*/\1/p' "$dir/summary.txt")"
  FOUND="${FOUND:-none}"
}

declare -A result
started=$SECONDS
next_pcrf="$MIN"
for k in "${rows[@]}"; do
  for t in $TARGETS; do
    if ((SECONDS - started > BUDGET)); then
      echo "skipped $t on $k cores: over the ${BUDGET} s budget" >&2
      result[$t,$k]="skipped"
      continue
    fi
    # pcrf starts from 0.9 of its figure on fewer cores; the echo server,
    # the ceiling, from pcrf's figure on these cores.
    start="$next_pcrf"
    if [[ $t == echo && "${result[pcrf,$k]:-}" =~ ^[0-9]+$ ]]; then
      start="${result[pcrf,$k]}"
    fi
    search "$t" "$k" "$start"
    result[$t,$k]="$FOUND"
    if [[ $t == pcrf && "$FOUND" =~ ^[0-9]+$ ]] && ((FOUND * 9 / 10 > next_pcrf)); then
      next_pcrf=$((FOUND * 9 / 10))
    fi
  done
done

table="$work/scaling.md"
{
  echo "Zero-loss TPS, seed-fast, p99 <= $P99_BOUND, trials of $DURATION; $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)); $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "| server cores | generator cores | pcrf | echo | pcrf/echo | pcrf per server core |"
  echo "|---:|---:|---:|---:|---:|---:|"
  for k in "${rows[@]}"; do
    p="${result[pcrf,$k]:-}"
    e="${result[echo,$k]:-}"
    if ((k == 0)); then sc="all (unpinned)"; gc="all"; per="n/a"; else
      sc="$k"; gc="$((n - k))"; per="$(ratio "$p" "$k")"; fi
    echo "| $sc | $gc | ${p:-} | ${e:-} | $(ratio "$p" "$e") | $per |"
  done
} >"$table"
mkdir -p "$BENCH_ROOT/bench/results"
cp "$table" "$BENCH_ROOT/bench/results/scaling.md"
cat "$table"
echo "elapsed: $((SECONDS - started)) s"
