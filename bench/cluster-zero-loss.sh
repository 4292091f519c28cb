#!/usr/bin/env bash
# Cluster zero-loss: the zero-loss throughput of the seed-fast scenario
# through the Diameter routing agent with 1 node and with 2 nodes on one
# PostgreSQL, side by side in one run, and their ratio (the goal: 2 nodes
# not lower than 1). Each search starts a fresh throwaway PostgreSQL cluster
# (PG_CONF, COMMIT_WINDOW_US), the nodes (`pcrf serve`, pcrfN.pcrf.example.net)
# and freeDiameterd with deploy/cluster/freediameter/ as it is (ports moved,
# the nodes not started left out), as bench/cluster.sh does; the gateways
# connect only to the agent, provision through every node, and run the
# same zero-loss search with the same settings (bench/lib.sh,
# zero_loss_search). New sessions spread at random over the nodes; after
# CCA-I a gateway names the node that answered (Destination-Host), so a
# session stays on its node. A trial passes when every request got a 2xxx
# answer, none timed out, p99 <= P99_BOUND and 99% of the offered rate was
# answered; the search doubles the rate from MIN until a trial fails, then
# bisects. With ROUNDS > 1 each round runs every node count (even rounds in
# the reverse order) and the table gives medians.
#
# Prints a markdown table (nodes, zero-loss TPS, p99 at that rate, ratio to
# 1 node; over the whole search, sessions taken over and write conflicts
# summed over the nodes, and the requests each node handled: how evenly the
# agent spread them) and writes it to bench/results/cluster-zero-loss.md,
# each search's report to bench/results/cluster-zero-loss-<N>-nodes-round-<R>.json.
#
#   bench/cluster-zero-loss.sh
#   BUILD=0 PCRF_BIN=/path/pcrf BENCH_BIN=/path/pcrf-bench ROUNDS=3 bench/cluster-zero-loss.sh
#   DURATION=2s MAX_TRIALS=3 SUBSCRIBERS=2000 bench/cluster-zero-loss.sh   # a quick check
#
# Environment: BUILD (1), PCRF_BIN, BENCH_BIN, NODES ("1 2": the node counts,
# 1 to 3, 1 included), ROUNDS (1), MIN (1000, every search's start), MAX
# (100000), DURATION (5s), WARMUP (2s), P99_BOUND (10ms), MAX_TRIALS (8),
# RESOLUTION (0.05), PAUSE (2s), RECOVERY (10s), PEERS (4), SUBSCRIBERS
# (100000), SCENARIO (bench/scenarios/seed-fast.toml; its realms are
# replaced by the agent's), PG_CONF and COMMIT_WINDOW_US (as in
# seed-scenario.sh), SERVER_CPUS and GEN_CPUS (bench/lib.sh; the nodes, the
# agent and PostgreSQL run on the server's CPUs), KEEP (0; 1 keeps the work
# directory with every log). Needs freeDiameterd
# (scripts/install-test-deps.sh), PostgreSQL's server binaries, curl, bash,
# coreutils and sed.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

for a in "$@"; do
  case "$a" in
    -h|--help) sed -n '2,39p' "$0"; exit 0 ;;
    *) die "unknown argument $a" ;;
  esac
done
NODES="${NODES:-1 2}"
MIN="${MIN:-1000}"
MAX="${MAX:-100000}"
DURATION="${DURATION:-5s}"
WARMUP="${WARMUP:-2s}"
P99_BOUND="${P99_BOUND:-10ms}"
MAX_TRIALS="${MAX_TRIALS:-8}"
RESOLUTION="${RESOLUTION:-0.05}"
PAUSE="${PAUSE:-2s}"
RECOVERY="${RECOVERY:-10s}"
PEERS="${PEERS:-4}"
SUBSCRIBERS="${SUBSCRIBERS:-100000}"
SCENARIO="${SCENARIO:-$BENCH_ROOT/bench/scenarios/seed-fast.toml}"
ROUNDS="${ROUNDS:-1}"
for n in $NODES; do
  [[ "$n" =~ ^[123]$ ]] || die "NODES lists node counts 1 to 3, not $n"
done
[[ " $NODES " == *" 1 "* ]] || die "NODES must include 1: the ratios are to 1 node"
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be 1 or more, not $ROUNDS"
# The search's settings (bench/lib.sh, zero_loss_search).
ZL_MAX="$MAX" ZL_DURATION="$DURATION" ZL_WARMUP="$WARMUP" ZL_MAX_TRIALS="$MAX_TRIALS"
ZL_RESOLUTION="$RESOLUTION" ZL_PAUSE="$PAUSE" ZL_RECOVERY="$RECOVERY" ZL_SUBSCRIBERS="$SUBSCRIBERS"
ZL_SCENARIO="$SCENARIO"

build_release pcrf pcrf-bench
set_pinning
cluster_work_dir pcrf-cluster-zl

# Every round runs each node count once; even rounds in the reverse order,
# so a drift of the machine's speed falls on both alike.
declare -A tps p99 taken conflicts requests
started=$SECONDS
read -r -a counts <<<"$NODES"
for r in $(seq "$ROUNDS"); do
  order=("${counts[@]}")
  if ((r % 2 == 0)); then
    order=()
    for ((i = ${#counts[@]} - 1; i >= 0; i--)); do order+=("${counts[i]}"); done
  fi
  for n in "${order[@]}"; do
    echo "== round $r of $ROUNDS: $n node(s) ==" >&2
    NODES="$n" zero_loss_search cluster "$work/nodes-$n-round-$r" "$MIN"
    tps[$n,$r]="$FOUND"
    p99[$n,$r]="$FOUND_P99"
    taken[$n,$r]="$TAKEN_OVER"
    conflicts[$n,$r]="$CONFLICTS"
    requests[$n,$r]="$NODE_REQUESTS"
  done
done

# row N: the table row of N nodes: the median round's figures (the round
# whose TPS is the median of N's rounds), every round's TPS when more than
# one, and the median over the rounds of N's TPS / 1 node's TPS of the same
# round.
row() {
  local n="$1" r figures=() ratios=() med pick=""
  for r in $(seq "$ROUNDS"); do
    figures+=("${tps[$n,$r]}")
    ratios+=("$(ratio "${tps[$n,$r]}" "${tps[1,$r]:-}")")
  done
  med="$(median "${figures[@]}")"
  for r in $(seq "$ROUNDS"); do
    if [[ "${tps[$n,$r]}" == "$med" ]]; then pick="$r"; break; fi
  done
  local all=""
  ((ROUNDS > 1)) && all=" (${figures[*]})"
  if [[ -z "$pick" ]]; then
    echo "| $n | none$all | n/a | n/a | n/a | n/a | n/a |"
    return
  fi
  echo "| $n | $med$all | ${p99[$n,$pick]} | $(median "${ratios[@]}") | ${taken[$n,$pick]} | ${conflicts[$n,$pick]} | ${requests[$n,$pick]} |"
}

results="$BENCH_ROOT/bench/results"
mkdir -p "$results"
table="$work/cluster-zero-loss.md"
{
  echo "Cluster zero-loss TPS through freeDiameter, $(basename "$SCENARIO" .toml), p99 <= $P99_BOUND, trials of $DURATION" \
    "(after $WARMUP), $SUBSCRIBERS subscribers, $PEERS gateways; one PostgreSQL${PG_CONF:+ ($(basename "$PG_CONF"))};" \
    "$ROUNDS round(s), medians; $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1));" \
    "$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "| nodes | zero-loss TPS | p99 at that rate | ratio to 1 node | sessions taken over | write conflicts | requests per node |"
  echo "|---:|---:|---:|---:|---:|---:|---:|"
  for n in "${counts[@]}"; do row "$n"; done
} >"$table"
for n in "${counts[@]}"; do
  for r in $(seq "$ROUNDS"); do
    if [[ -f "$work/nodes-$n-round-$r/report.json" ]]; then
      cp "$work/nodes-$n-round-$r/report.json" "$results/cluster-zero-loss-$n-nodes-round-$r.json"
    fi
  done
done
cp "$table" "$results/cluster-zero-loss.md"
cat "$table"
echo "elapsed: $((SECONDS - started)) s"
