#!/usr/bin/env bash
# How long a deployment takes to reach every node of a three-node cluster
# under load: three `pcrf serve` nodes on one throwaway PostgreSQL database
# behind freeDiameter as the routing agent (as bench/cluster.sh, without
# the kill), pcrf-bench sending the cluster scenario at RATE requests/s
# through the agent, and DEPLOYS deployments, GAP seconds apart, each on
# the next node in turn: policy scripts (the default policy with a comment
# that makes it a new version) and, alternately with them when USAGE=1,
# usage files (config/usage.toml with a comment).
#
# For each deployment: the time from sending the PUT to every node serving
# the new version (each node's GET /v1/policy `id`, or GET
# /v1/usage/versions `serving`, polled every 10 ms from the moment the PUT
# is sent), and the deploying node's answer time (it waits for the
# others' heartbeats to say so). Then whether every answer of the load
# was 2001.
#
#   bench/policy-deploy.sh
#   RATE=1000 DEPLOYS=10 GAP=3 bench/policy-deploy.sh
#
# Environment: RATE (1000), DEPLOYS (10), GAP (3 s), USAGE (1), SUBSCRIBERS
# (10000), PEERS (4), BUILD, PCRF_BIN, BENCH_BIN, KEEP as bench/cluster.sh.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

RATE="${RATE:-1000}"
DEPLOYS="${DEPLOYS:-10}"
GAP="${GAP:-3}"
USAGE="${USAGE:-1}"
SUBSCRIBERS="${SUBSCRIBERS:-10000}"
PEERS="${PEERS:-4}"
need curl curl

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

build_release pcrf pcrf-bench
cluster_work_dir pcrf-deploy
start_postgres
start_cluster "$work" 3
for api in "${NODE_APIS[@]}"; do
  "$BENCH_BIN" provision --scenario "$BENCH_ROOT/bench/scenarios/cluster.toml" \
    --api "$api" --subscribers "$SUBSCRIBERS" >/dev/null
done
log "provisioned $SUBSCRIBERS subscribers"

# The cluster scenario without its kill.
sed '/^\[cluster\]/,$d' "$BENCH_ROOT/bench/scenarios/cluster.toml" >"$work/load.toml"
duration=$((8 + DEPLOYS * GAP))
log "load: $RATE requests/s for ${duration}s through the agent; $DEPLOYS deployments ${GAP}s apart from 4s"
"${GEN_PIN[@]}" "$BENCH_BIN" run --scenario "$work/load.toml" \
  --target "127.0.0.1:$AGENT_PORT" --peers "$PEERS" --subscribers "$SUBSCRIBERS" \
  --rate "$RATE" --duration "${duration}s" --warmup 1s \
  --out "$work/report.json" >"$work/gen.out" 2>"$work/gen.err" &
gen=$!
sleep 4

python3 - "$DEPLOYS" "$GAP" "$USAGE" "$BENCH_ROOT" "${NODE_APIS[@]}" >"$work/deploys.txt" <<'PY'
import json, statistics, sys, threading, time, urllib.request

deploys, gap, usage, root = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
apis = sys.argv[5:]
policy = open(f"{root}/policies/default.lua").read()
usage_file = open(f"{root}/config/usage.toml").read()

def call(method, url, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)

def serving(api, what):
    if what == "policy":
        return call("GET", f"{api}/v1/policy")["id"]
    return call("GET", f"{api}/v1/usage/versions?limit=1")["serving"]

spreads = {"policy": [], "usage": []}
for k in range(deploys):
    what = "usage" if usage and k % 2 == 1 else "policy"
    api = apis[k % len(apis)]
    stamp = f"deployment {k + 1} at {time.time()}"
    if what == "policy":
        path, body = "/v1/policy", {"source": policy + f"\n-- {stamp}\n", "comment": stamp}
    else:
        path, body = "/v1/usage", {"source": usage_file + f"\n# {stamp}\n", "comment": stamp}
    # The PUT in a thread of its own: the nodes are polled from the moment
    # it is sent, not from its answer (which waits for their heartbeats).
    version = max(serving(a, what) for a in apis) + 1
    done = {}
    def put():
        done["answer"] = call("PUT", api + path, body)
        done["at"] = time.monotonic()
    t0 = time.monotonic()
    sender = threading.Thread(target=put)
    sender.start()
    pending = set(apis)
    while pending:
        pending = {a for a in pending if serving(a, what) < version}
        if pending:
            time.sleep(0.01)
        if time.monotonic() - t0 > 30:
            sys.exit(f"{what} version {version} not served everywhere after 30 s: {pending}")
    everywhere = time.monotonic() - t0
    sender.join()
    answer = done["answer"]
    answered = done["at"] - t0
    if answer["deployed"]["id"] != version:
        sys.exit(f"deployed {answer['deployed']['id']}, expected {version}")
    spreads[what].append(everywhere)
    states = [n["state"] for n in answer["nodes"]]
    print(f"{what} version {version} on node {k % len(apis) + 1}: answered in {answered * 1000:.0f} ms "
          f"(others: {states}), served by all 3 nodes after {everywhere * 1000:.0f} ms")
    time.sleep(max(0.0, gap - everywhere))
for what, s in spreads.items():
    if s:
        print(f"{what}: {len(s)} deployments, served by all 3 nodes after median {statistics.median(s) * 1000:.0f} ms, max {max(s) * 1000:.0f} ms")
PY
cat "$work/deploys.txt"
wait "$gen" || die "pcrf-bench run failed: $(tail -20 "$work/gen.err")"
python3 - "$work/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
sent = sum(c["sent"] for c in r["commands"])
ok = sum(c["results"].get("2001", 0) for c in r["commands"])
other = {code: n for c in r["commands"] for code, n in c["results"].items() if code != "2001"}
lost = sum(c["timeouts"] + c["send_failures"] for c in r["commands"])
p99 = max(c["latency"]["p99_ms"] for c in r["commands"] if c["latency"]["count"])
print(f"load: {sent} requests at {r['achieved_tps']:.0f}/s, {ok} answered 2001, other results {other or 'none'}, "
      f"{lost} timed out or unsent; worst command p99 {p99:.1f} ms")
sys.exit(0 if ok == sent else 1)
PY
