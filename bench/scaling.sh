#!/usr/bin/env bash
# Core scaling: the zero-loss throughput of the seed-fast scenario with the
# server pinned to 1, 2, 4 and 8 cores (those the machine has; the generator
# gets all the others, and shares them on the row with all the machine's
# CPUs, e.g. "2" on a 2-CPU machine: the table says so), against
# `pcrf serve` (embedded store, durability full) and against the echo
# server (the ceiling of generator + transport), side by side. Prints a
# markdown table and writes it to bench/results/scaling.md.
#
#   bench/scaling.sh
#   BUILD=0 PCRF_BIN=/path/pcrf BENCH_BIN=/path/pcrf-bench bench/scaling.sh   # prebuilt release binaries
#   CORES="1 2" bench/scaling.sh                                               # some rows only
#
# Needs only the two binaries, bash, coreutils, sed, curl and taskset (no cargo
# with BUILD=0 or PCRF_BIN/BENCH_BIN, no jq, no python). The searches are short
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
# The search's settings (bench/lib.sh, zero_loss_search).
ZL_MAX="$MAX" ZL_DURATION="$DURATION" ZL_WARMUP="$WARMUP" ZL_MAX_TRIALS="$MAX_TRIALS"
ZL_RESOLUTION="$RESOLUTION" ZL_PAUSE="$PAUSE" ZL_RECOVERY="$RECOVERY" ZL_SUBSCRIBERS="$SUBSCRIBERS"

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
# All the machine's CPUs, when CORES names that many (on a 2-CPU machine,
# "2"): the generator then shares them, and the table says so.
if ((n > 1)) && [[ " $CORES " == *" $n "* ]]; then rows+=("$n"); fi
((${#rows[@]} > 0)) || rows=(0)

# cpu_range FIRST LAST: a taskset list ("3" or "0-3").
cpu_range() { if (($1 == $2)); then echo "$1"; else echo "$1-$2"; fi; }

# pin K: the server on CPUs 0..K-1 and the generator on the others; when
# K is all the CPUs, the generator shares them (unpinned); K=0: unpinned.
pin() {
  local k="$1"
  if ((k == 0)); then set_pinning all all
  elif ((k >= n)); then set_pinning "$(cpu_range 0 $((n - 1)))" all
  else set_pinning "$(cpu_range 0 $((k - 1)))" "$(cpu_range "$k" $((n - 1)))"; fi
}

# search KIND K START: sets FOUND to the zero-loss TPS of KIND (pcrf or
# echo) with the server on K cores, "none" when no trial passed.
search() {
  local kind="$1" k="$2" start="$3"
  pin "$k"
  echo "== $kind, server on $k cores ==" >&2
  zero_loss_search "$kind" "$work/$kind-$k" "$start"
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
    if ((k == 0)); then sc="all (unpinned)"; gc="all"; per="n/a"
    elif ((k >= n)); then sc="$k"; gc="shares the $k"; per="$(ratio "$p" "$k")"
    else sc="$k"; gc="$((n - k))"; per="$(ratio "$p" "$k")"; fi
    echo "| $sc | $gc | ${p:-} | ${e:-} | $(ratio "$p" "$e") | $per |"
  done
} >"$table"
mkdir -p "$BENCH_ROOT/bench/results"
cp "$table" "$BENCH_ROOT/bench/results/scaling.md"
cat "$table"
echo "elapsed: $((SECONDS - started)) s"
