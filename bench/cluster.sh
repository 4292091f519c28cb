#!/usr/bin/env bash
# The cluster benchmark: three `pcrf serve` nodes on one throwaway
# PostgreSQL database behind freeDiameter as the Diameter routing agent
# (deploy/cluster/freediameter/, ports moved to free ones), pcrf-bench's
# gateways connected only to the agent, and one node killed with SIGKILL
# during the load (bench/scenarios/cluster.toml's [cluster] section).
#
# Reports:
#   - acknowledged changes lost: `pcrf-bench verify` compares what the
#     gateways got acknowledged with what a surviving node's API reports
#     (must be 0; the script exits non-zero otherwise);
#   - requests failed for good (after RETRANSMIT resends) and for how long,
#     from the first failure to the last;
#   - acknowledged throughput in the 10 s before the kill and the 10 s after.
#
#   bench/cluster.sh
#   RATE=1000 DURATION=40 KILL_AT=20 bench/cluster.sh
#
# Environment: RATE (1000 requests/s), DURATION (40 s), KILL_AT (20 s from
# the start of the load), VICTIM (2: the node killed, 1..3), SUBSCRIBERS
# (10000), PEERS (4 gateways), RETRANSMIT (5 resends), BUILD (1; 0 uses the
# release binaries as they are, as do PCRF_BIN/BENCH_BIN), KEEP (0; 1 keeps
# the work directory with every log). Needs freeDiameterd
# (scripts/install-test-deps.sh), PostgreSQL's server binaries and curl.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

RATE="${RATE:-1000}"
DURATION="${DURATION:-40}"
KILL_AT="${KILL_AT:-20}"
VICTIM="${VICTIM:-2}"
SUBSCRIBERS="${SUBSCRIBERS:-10000}"
PEERS="${PEERS:-4}"
RETRANSMIT="${RETRANSMIT:-5}"
((VICTIM >= 1 && VICTIM <= 3)) || die "VICTIM must be 1..3"
((KILL_AT >= 1 && KILL_AT < DURATION)) || die "need 1 <= KILL_AT < DURATION"
need freeDiameterd "freediameterd freediameter-extensions"
need curl curl

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

build_release pcrf pcrf-bench
cluster_work_dir pcrf-cluster

start_postgres
log "PostgreSQL on $PG_URL"
# The three nodes and the agent (bench/lib.sh, start_cluster).
start_cluster "$work" 3
APIS=("${NODE_APIS[@]}")

# Through every node: a node that caches subscriber profiles learns of a
# change made through another node only where provisioning changes are
# broadcast to the cluster.
for api in "${APIS[@]}"; do
  "$BENCH_BIN" provision --scenario "$BENCH_ROOT/bench/scenarios/cluster.toml" \
    --api "$api" --subscribers "$SUBSCRIBERS" >/dev/null
done
log "provisioned $SUBSCRIBERS subscribers"

# The scenario with this run's kill time; its kill_command reads the pid file.
sed "s/^kill_at = .*/kill_at = \"${KILL_AT}s\"/" \
  "$BENCH_ROOT/bench/scenarios/cluster.toml" >"$work/cluster.toml"
export PCRF_KILL_PID_FILE="$work/pcrf$VICTIM.pid"
log "load: $RATE requests/s for ${DURATION}s through the agent; node $VICTIM killed at ${KILL_AT}s"
"${GEN_PIN[@]}" "$BENCH_BIN" run --scenario "$work/cluster.toml" \
  --target "127.0.0.1:$AGENT_PORT" --peers "$PEERS" --subscribers "$SUBSCRIBERS" \
  --rate "$RATE" --duration "${DURATION}s" --warmup 1s \
  --retransmit "$RETRANSMIT" --retransmit-wait 5s \
  --answer-log "$work/answers.jsonl" --out "$work/report.json" \
  --failover-out "$work/failover.json" >"$work/gen.out" 2>"$work/gen.err" \
  || die "pcrf-bench run failed: $(tail -20 "$work/gen.err")"
cat "$work/gen.out"

# What was acknowledged, against what a surviving node reports.
survivor=$((VICTIM % 3 + 1))
verified=0
"$BENCH_BIN" verify --answer-log "$work/answers.jsonl" --api "${APIS[survivor - 1]}" \
  --out "$work/verify.json" >"$work/verify.out" 2>&1 || verified=$?
cat "$work/verify.out"
if ((verified != 0)); then
  die "acknowledged changes were lost or counted twice (verify through node $survivor)"
fi
log "no acknowledged change lost (verify through node $survivor)"
