# Shared by the bench scripts: building release binaries, free loopback
# ports, pinning the server and the generator to separate cores,
# starting/stopping the server under test (`pcrf serve` on the embedded
# store or a throwaway PostgreSQL, `pcrf-bench echo-server`, or a cluster of
# nodes behind freeDiameter), and the zero-loss search against any of them
# or against another Gx PCRF already running.
# Source it; do not run it.
#
# Binaries: $CARGO_TARGET_DIR/release (built unless BUILD=0), or PCRF_BIN
# and BENCH_BIN (paths to prebuilt `pcrf` and `pcrf-bench`; BUILD=0 is then
# implied, and nothing but bash, coreutils and taskset is needed).
#
# Pinning: SERVER_CPUS and GEN_CPUS are taskset CPU lists (e.g. 0-7 and
# 8-15). By default, on a machine with more than 2 CPUs, the server gets
# the first half and the generator the rest; on 2 or fewer nothing is
# pinned (both share the CPUs, as before). SERVER_CPUS=all GEN_CPUS=all
# turns pinning off.

# The repository root, whatever the caller's directory.
BENCH_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$BENCH_ROOT/target}"
BIN="$CARGO_TARGET_DIR/release"
PCRF_BIN="${PCRF_BIN:-$BIN/pcrf}"
BENCH_BIN="${BENCH_BIN:-$BIN/pcrf-bench}"
if [[ "$PCRF_BIN" != "$BIN/pcrf" || "$BENCH_BIN" != "$BIN/pcrf-bench" ]]; then
  BUILD=0
fi

# Command prefixes that pin the server and the generator (set_pinning).
SERVER_PIN=()
GEN_PIN=()

die() { echo "$(basename "$0"): $*" >&2; exit 1; }

need() { command -v "$1" >/dev/null 2>&1 || die "needs $1 (apt-get install $2)"; }

# The binary for a package name (pcrf or pcrf-bench).
bin_of() {
  case "$1" in
    pcrf) echo "$PCRF_BIN" ;;
    pcrf-bench) echo "$BENCH_BIN" ;;
    *) echo "$BIN/$1" ;;
  esac
}

# build_release PACKAGE...: release binaries of the given packages
# (BUILD=0 uses the binaries already there: $CARGO_TARGET_DIR/release, or
# PCRF_BIN / BENCH_BIN).
build_release() {
  if [[ "${BUILD:-1}" == 0 ]]; then
    local p
    for p in "$@"; do
      [[ -x "$(bin_of "$p")" ]] || die "BUILD=0 but $(bin_of "$p") does not exist"
    done
    return 0
  fi
  local args=()
  for p in "$@"; do args+=(-p "$p"); done
  (cd "$BENCH_ROOT" && cargo build --release "${args[@]}") >&2 \
    || die "cargo build --release ${args[*]} failed"
}

# set_pinning [SERVER_CPUS GEN_CPUS]: sets SERVER_PIN and GEN_PIN, the
# command prefixes (taskset -c LIST, or nothing) that start the server and
# the generator; with no arguments, from the environment and the defaults
# described above. Prints what it chose on stderr.
set_pinning() {
  local server="${1:-${SERVER_CPUS:-}}" gen="${2:-${GEN_CPUS:-}}" n
  n="$(nproc)"
  if [[ -z "$server" && -z "$gen" && "$n" -gt 2 ]]; then
    server="0-$((n / 2 - 1))"
    gen="$((n / 2))-$((n - 1))"
  fi
  SERVER_PIN=()
  GEN_PIN=()
  if [[ -n "$server" && "$server" != all ]] || [[ -n "$gen" && "$gen" != all ]]; then
    need taskset util-linux
  fi
  [[ -n "$server" && "$server" != all ]] && SERVER_PIN=(taskset -c "$server")
  [[ -n "$gen" && "$gen" != all ]] && GEN_PIN=(taskset -c "$gen")
  echo "pinning: server on CPUs ${server:-all}, generator on CPUs ${gen:-all} ($n CPUs)" >&2
}

# gen: runs the generator (pcrf-bench) with its pinning.
gen() {
  "${GEN_PIN[@]}" "$BENCH_BIN" "$@"
}

# ratio A B: A / B with 2 decimals (A and B decimal numbers), "n/a" when
# either is missing or B is 0; bash arithmetic only.
ratio() {
  local a="$1" b="$2"
  [[ "$a" =~ ^[0-9]+(\.[0-9]+)?$ && "$b" =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo n/a; return; }
  # Both scaled to thousandths.
  local ai af bi bf
  ai="${a%%.*}"; af="${a#"$ai"}"; af="${af#.}000"; af="${af:0:3}"
  bi="${b%%.*}"; bf="${b#"$bi"}"; bf="${bf#.}000"; bf="${bf:0:3}"
  local an=$((10#$ai * 1000 + 10#$af)) bn=$((10#$bi * 1000 + 10#$bf))
  ((bn > 0)) || { echo n/a; return; }
  local r=$(((an * 100 + bn / 2) / bn))
  printf '%d.%02d\n' $((r / 100)) $((r % 100))
}

# free_port: a loopback TCP port nothing listens on now, below the
# kernel's ephemeral range where it can (an outgoing connection of the
# agent, PostgreSQL or another process could take a port in that range
# between this choice and the listener's bind).
free_port() {
  local p low hi=60000
  read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || low=""
  [[ "$low" =~ ^[0-9]+$ ]] && ((low > 21000)) && hi=$((low - 1))
  for p in $(shuf -i "20000-$hi" -n 50); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  die "no free loopback port found"
}

# wait_port PORT SECONDS: until something accepts on 127.0.0.1:PORT.
wait_port() {
  local deadline=$((SECONDS + $2))
  while ((SECONDS < deadline)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

# start_echo WORKDIR: starts the echo server; sets SERVER_PID, DIAMETER_PORT.
start_echo() {
  local work="$1"
  "${SERVER_PIN[@]}" "$BENCH_BIN" echo-server --listen 127.0.0.1:0 >"$work/echo.out" 2>"$work/echo.err" &
  SERVER_PID=$!
  local i
  for i in $(seq 50); do
    if grep -q '^listening on ' "$work/echo.out" 2>/dev/null; then break; fi
    sleep 0.1
  done
  DIAMETER_PORT="$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$work/echo.out")"
  [[ -n "$DIAMETER_PORT" ]] || die "echo-server did not start: $(cat "$work/echo.err")"
  API_URL=""
  SERVER_NAME="echo-server"
}

as_pg() {
  if [[ "$(id -u)" -eq 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

PG_TMP=""
PG_BIN=""
PG_PORT=""
PG_URL=""

# start_postgres: a throwaway cluster (as scripts/test.sh makes one) on a
# free 127.0.0.1 port with database pcrf; sets PG_TMP, PG_BIN, PG_PORT and
# PG_URL. PG_CONF names a postgresql.conf to include (e.g.
# deploy/postgresql.conf.sample); without it, Debian's defaults.
start_postgres() {
  PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [[ -n "$PG_BIN" && -x "$PG_BIN/initdb" ]] \
    || die "PostgreSQL server binaries not found under /usr/lib/postgresql (scripts/install-test-deps.sh installs them)"
  PG_TMP=$(mktemp -d "${TMPDIR:-/tmp}/pcrf-pg.XXXXXX")
  [[ "$(id -u)" -eq 0 ]] && chown postgres "$PG_TMP"
  PG_PORT="$(free_port)"
  as_pg "$PG_BIN/initdb" -D "$PG_TMP/data" -U pcrf --auth=trust -E UTF8 >"$PG_TMP/initdb.log" 2>&1 \
    || die "initdb failed: $(tail -5 "$PG_TMP/initdb.log")"
  if [[ -n "${PG_CONF:-}" ]]; then
    [[ -r "$PG_CONF" ]] || die "PG_CONF=$PG_CONF is not readable"
    cp "$PG_CONF" "$PG_TMP/data/included.conf"
    echo "include 'included.conf'" >>"$PG_TMP/data/postgresql.conf"
  fi
  pg_up || die "PostgreSQL did not start: $(tail -5 "$PG_TMP/server.log")"
  as_pg "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U pcrf pcrf
  PG_URL="postgres://pcrf@127.0.0.1:$PG_PORT/pcrf"
}

# The cluster runs on the server's CPUs (SERVER_PIN): it is part of the
# system under test.
pg_up() {
  as_pg "${SERVER_PIN[@]}" "$PG_BIN/pg_ctl" -D "$PG_TMP/data" -l "$PG_TMP/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PG_TMP -c fsync=on -c max_connections=100" start >/dev/null
}

# pg_down MODE: stops the cluster's server (fast or immediate).
pg_down() {
  as_pg "$PG_BIN/pg_ctl" -D "$PG_TMP/data" -m "${1:-fast}" -w -t 60 stop >/dev/null
}

stop_postgres() {
  if [[ -n "$PG_TMP" && -d "$PG_TMP" ]]; then
    as_pg "$PG_BIN/pg_ctl" -D "$PG_TMP/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$PG_TMP"
  fi
  PG_TMP=""
}

# start_pcrf WORKDIR PEERS [HOST...]: `pcrf serve` on the embedded store (durability
# full) in WORKDIR/data, or with STORE=postgres on the database PG_URL names (the
# cluster of start_postgres); COMMIT_WINDOW_US sets [store] commit_window_us
# (unset: the server's default, 2000 µs on PostgreSQL since 2026-11-25, 0 on
# the embedded store). The
# example policy and usage file, PEERS emulated gateways (and the other HOSTs,
# e.g. pcscf-1.ims.test) allowed; sets SERVER_PID, DIAMETER_PORT, API_URL.
start_pcrf() {
  local work="$1" peers="$2" i hosts=() store
  DIAMETER_PORT="$(free_port)"
  local api_port
  api_port="$(free_port)"
  API_URL="http://127.0.0.1:$api_port"
  for i in $(seq "$peers"); do hosts+=("pgw-$i.bench.test"); done
  hosts+=("${@:3}")
  if [[ "${STORE:-sqlite}" == postgres ]]; then
    store="$(postgres_store_section "$PG_URL")"
  else
    store="$(sqlite_store_section "$work/data")"
  fi
  pcrf_config "$DIAMETER_PORT" "$api_port" "$store" "${hosts[@]}" >"$work/pcrf.toml"
  "${SERVER_PIN[@]}" "$PCRF_BIN" serve --config "$work/pcrf.toml" >"$work/pcrf.out" 2>"$work/pcrf.err" &
  SERVER_PID=$!
  wait_port "$DIAMETER_PORT" 30 && wait_port "$api_port" 10 \
    || die "pcrf serve did not start: $(tail -20 "$work/pcrf.err")"
  SERVER_NAME="pcrf"
}

# pcrf_config DIAMETER_PORT API_PORT STORE_SECTION HOST...: the benches'
# configuration of `pcrf serve` on stdout: loopback listeners, each HOST a
# peer allowed from 127.0.0.1, the given [store] body (COMMIT_WINDOW_US
# and WRITERS added: the store's window, its shards and writers), the
# example policy and usage file, warnings only in the log.
# MAX_PENDING sets [diameter].max_pending_requests and OVERLOAD_INTERVAL_MS
# [overload].interval_ms (unset: the server's defaults); with
# MAX_PENDING=2000 OVERLOAD_INTERVAL_MS=60000 the server sheds as it did
# before overload control measured queueing delay (a count of 2,000).
pcrf_config() {
  local dport="$1" aport="$2" store="$3" h
  shift 3
  echo '[node]'
  echo 'origin_host = "pcrf.pcrf.test"'
  echo 'origin_realm = "pcrf.test"'
  echo '[diameter]'
  echo "listen = \"127.0.0.1:$dport\""
  echo 'max_in_flight = 65536'
  if [[ -n "${MAX_PENDING:-}" ]]; then echo "max_pending_requests = $MAX_PENDING"; fi
  if [[ -n "${OVERLOAD_INTERVAL_MS:-}" ]]; then
    printf '[overload]\ninterval_ms = %s\n' "$OVERLOAD_INTERVAL_MS"
  fi
  for h in "$@"; do
    echo '[[peers]]'
    echo "origin_host = \"$h\""
    echo 'addresses = ["127.0.0.1"]'
  done
  echo '[store]'
  echo "$store"
  if [[ -n "${COMMIT_WINDOW_US:-}" ]]; then echo "commit_window_us = $COMMIT_WINDOW_US"; fi
  if [[ -n "${WRITERS:-}" ]]; then echo "writers = $WRITERS"; fi
  echo '[policy]'
  echo "path = \"$BENCH_ROOT/policies/default.lua\""
  echo 'watch = false'
  echo '[usage]'
  echo "path = \"$BENCH_ROOT/config/usage.toml\""
  echo '[api]'
  echo "listen = \"127.0.0.1:$aport\""
  echo '[log]'
  echo 'level = "warn"'
  # More sections (e.g. [notifications]) from a file, for benches that need them.
  if [[ -n "${PCRF_EXTRA_CONFIG:-}" ]]; then cat "$PCRF_EXTRA_CONFIG"; fi
}

# sqlite_store_section DIR / postgres_store_section URL: [store] bodies for
# pcrf_config (the embedded store with durability DURABILITY, full unless
# set, or PostgreSQL).
sqlite_store_section() {
  printf 'kind = "sqlite"\npath = "%s"\ndurability = "%s"\n' "$1" "${DURABILITY:-full}"
}
postgres_store_section() {
  printf 'kind = "postgres"\nurl = "%s"\n' "$1"
}

# postgres_pids: the throwaway cluster's postmaster and its children now
# (the PCRF's backend included once it is connected).
postgres_pids() {
  local pm
  pm="$(head -n 1 "$PG_TMP/data/postmaster.pid" 2>/dev/null)" || return 1
  echo "$pm"
  pgrep -P "$pm"
}

# stop_server: SIGTERM, then wait (the server shuts down gracefully).
stop_server() {
  if [[ -n "${SERVER_PID:-}" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}

# The cluster (bench/cluster.sh, bench/cluster-zero-loss.sh): `pcrf serve`
# nodes on the database PG_URL names (start_postgres) behind freeDiameterd
# as the Diameter routing agent.
CLUSTER_AGENT=dra1.dra.example.net
NODE_PIDS=()
NODE_APIS=()
NODE_DPORTS=()
AGENT_PORT=""
FD_PID=""

# start_cluster WORK NODES: nodes pcrfN.pcrf.example.net, N = 1..NODES (at
# most 3, the nodes deploy/cluster/freediameter/dra.conf names), each with
# its own free ports and the agent as its only peer (a relay), started one
# at a time (the first applies the schema migrations); then the agent,
# deploy/cluster/freediameter/ with its files in WORK, free ports instead
# of 3868 and 3871..3873 and the lines of the nodes not started left out.
# Returns when the agent is connected to every node. The nodes and the
# agent run with SERVER_PIN: they are the system under test.
# COMMIT_WINDOW_US sets the nodes' [store] commit_window_us. Sets
# NODE_PIDS, NODE_APIS, NODE_DPORTS, AGENT_PORT and FD_PID; writes
# WORK/pcrfN.pid (the kill scenario reads it). Needs freeDiameterd and curl.
start_cluster() {
  local work="$1" nodes="$2" i dport aport deadline
  ((nodes >= 1 && nodes <= 3)) || die "the cluster has 1 to 3 nodes, not $nodes"
  need freeDiameterd "freediameterd freediameter-extensions"
  need curl curl
  NODE_PIDS=()
  NODE_APIS=()
  NODE_DPORTS=()
  for i in $(seq "$nodes"); do
    dport="$(free_port)"
    aport="$(free_port)"
    NODE_DPORTS+=("$dport")
    NODE_APIS+=("http://127.0.0.1:$aport")
    # Copies: a deployment rewrites a node's policy and usage files.
    cp "$BENCH_ROOT/policies/default.lua" "$work/pcrf$i.lua"
    cp "$BENCH_ROOT/config/usage.toml" "$work/pcrf$i-usage.toml"
    cat >"$work/pcrf$i.toml" <<TOML
[node]
origin_host = "pcrf$i.pcrf.example.net"
origin_realm = "pcrf.example.net"
[diameter]
listen = "127.0.0.1:$dport"
max_in_flight = 65536
[[peers]]
origin_host = "$CLUSTER_AGENT"
addresses = ["127.0.0.1"]
relay = true
[store]
kind = "postgres"
url = "$PG_URL"
${COMMIT_WINDOW_US:+commit_window_us = $COMMIT_WINDOW_US}
[policy]
path = "$work/pcrf$i.lua"
watch = false
[usage]
path = "$work/pcrf$i-usage.toml"
[api]
listen = "127.0.0.1:$aport"
[log]
level = "warn"
TOML
    "${SERVER_PIN[@]}" "$PCRF_BIN" serve --config "$work/pcrf$i.toml" \
      >"$work/pcrf$i.out" 2>"$work/pcrf$i.err" &
    NODE_PIDS+=("$!")
    echo "$!" >"$work/pcrf$i.pid"
    wait_port "$dport" 60 && wait_port "$aport" 10 \
      || die "node $i did not start: $(tail -20 "$work/pcrf$i.err")"
    echo "pcrf$i.pcrf.example.net (pid $!) on 127.0.0.1:$dport, API ${NODE_APIS[-1]}" >&2
  done

  local deploy="$BENCH_ROOT/deploy/cluster/freediameter" edits
  AGENT_PORT="$(free_port)"
  cp "$deploy/acl_wl.conf" "$deploy/rt_default.conf" "$work/"
  edits=(-e "s#/etc/freeDiameter/#$work/#g" -e "s/Port = 3868;/Port = $AGENT_PORT;/")
  for i in 1 2 3; do
    if ((i <= nodes)); then
      edits+=(-e "s/Port = 387$i;/Port = ${NODE_DPORTS[i - 1]};/")
    else
      edits+=(-e "/^ConnectPeer = \"pcrf$i\\.pcrf\\.example\\.net\"/d")
    fi
  done
  sed "${edits[@]}" "$deploy/dra.conf" >"$work/dra.conf"
  "${SERVER_PIN[@]}" freeDiameterd -c "$work/dra.conf" >"$work/freeDiameterd.log" 2>&1 &
  FD_PID=$!
  for i in $(seq "$nodes"); do
    deadline=$((SECONDS + 30))
    until curl -sf "${NODE_APIS[i - 1]}/metrics" \
      | grep -q "^pcrf_peer_state{peer=\"$CLUSTER_AGENT\",state=\"open\"} 1"; do
      ((SECONDS < deadline)) || die "the agent did not connect to node $i: $(tail -20 "$work/freeDiameterd.log")"
      sleep 0.2
    done
  done
  echo "freeDiameterd (pid $FD_PID) on 127.0.0.1:$AGENT_PORT, connected to $nodes node(s)" >&2
}

# stop_cluster: SIGTERM to the agent, then to every node still running,
# waiting for each.
stop_cluster() {
  local p
  if [[ -n "$FD_PID" ]]; then
    kill -TERM "$FD_PID" 2>/dev/null && wait "$FD_PID" 2>/dev/null
  fi
  FD_PID=""
  for p in "${NODE_PIDS[@]}"; do
    kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null
  done
  NODE_PIDS=()
  return 0
}

# cluster_work_dir NAME: sets `work` to a new scratch directory for a
# cluster bench, and on exit stops the cluster and PostgreSQL and removes
# it (KEEP=1 keeps it, with every log).
cluster_work_dir() {
  work="$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")"
  trap cluster_cleanup EXIT
  trap 'exit 130' INT TERM
}
cluster_cleanup() {
  set +e
  stop_cluster
  stop_postgres
  if [[ "${KEEP:-0}" == 1 ]]; then echo "work directory kept: $work" >&2; else rm -rf "$work"; fi
}

# through_agent SCENARIO: the scenario on stdout with the realms of
# deploy/cluster/freediameter/ (the agent admits *.pgw.example.net and
# routes pcrf.example.net to the nodes); its mix is unchanged.
through_agent() {
  sed -e 's/^origin_realm = .*/origin_realm = "pgw.example.net"/' \
    -e 's/^destination_realm = .*/destination_realm = "pcrf.example.net"/' "$1"
}

# requests_per_node: the requests each node handled (its
# pcrf_requests_total summed over the labels), "N1 / N2 ..."; "?" for a
# node that does not answer.
requests_per_node() {
  local api m out=()
  for api in "${NODE_APIS[@]}"; do
    if m="$(curl -sf "$api/metrics")"; then
      out+=("$(awk '/^pcrf_requests_total[{ ]/ { n += $NF } END { printf "%d", n }' <<<"$m")")
    else
      out+=("?")
    fi
  done
  local IFS=/
  echo "${out[*]}" | sed 's#/# / #g'
}

# cluster_counter NAME: the counter NAME (no labels) summed over the nodes
# that answer.
cluster_counter() {
  local api sum=0 v
  for api in "${NODE_APIS[@]}"; do
    v="$(curl -sf "$api/metrics" | sed -n "s/^$1 \([0-9]*\)\$/\1/p")" || true
    sum=$((sum + ${v:-0}))
  done
  echo "$sum"
}

# zero_loss_search KIND DIR START: one zero-loss search of ZL_SCENARIO
# (default bench/scenarios/seed-fast.toml) against KIND, with the pinning
# set_pinning chose, from START TPS:
#   pcrf     `pcrf serve` on STORE (the embedded store, or postgres on a
#            throwaway cluster), provisioned through its API;
#   echo     the echo server;
#   cluster  NODES (2) nodes on a throwaway PostgreSQL behind the routing
#            agent (start_cluster), the scenario's realms those of the
#            agent (through_agent), provisioned through every node; CPU is
#            that of the nodes (PostgreSQL's as --db-pid), not the agent's;
#   other    another Gx PCRF already running and provisioned (bench/versus.sh):
#            OTHER_TARGET (host:port), OTHER_PID (its comma-separated PIDs),
#            OTHER_REALM (its Destination-Realm, when not the scenario's).
# The report goes to DIR/report.json, the summary to DIR/summary.txt and
# the trials' lines to DIR/trials.txt. Sets FOUND to the zero-loss TPS
# ("none" when no trial passed) and FOUND_P99 to the p99 of the trial at
# that rate ("n/a" when none); for a cluster also TAKEN_OVER and
# CONFLICTS, the nodes' pcrf_cluster_sessions_taken_over_total and
# pcrf_cluster_conflicts_total summed at the end of the search, and
# NODE_REQUESTS (requests_per_node) then.
# Settings: ZL_MAX (400000), ZL_DURATION (10s), ZL_WARMUP (2s), P99_BOUND
# (10ms), ZL_MAX_TRIALS (10), ZL_RESOLUTION (0.05), ZL_PAUSE (2s),
# ZL_RECOVERY (15s), PEERS (4), ZL_SUBSCRIBERS (100000).
zero_loss_search() {
  local kind="$1" dir="$2" start="$3" p api target target_addr="" scenario
  scenario="${ZL_SCENARIO:-$BENCH_ROOT/bench/scenarios/seed-fast.toml}"
  mkdir -p "$dir"
  local args=(zero-loss --peers "${PEERS:-4}" --subscribers "${ZL_SUBSCRIBERS:-100000}"
    --min "$start" --max "${ZL_MAX:-400000}" --duration "${ZL_DURATION:-10s}" --warmup "${ZL_WARMUP:-2s}"
    --p99-bound "${P99_BOUND:-10ms}" --max-trials "${ZL_MAX_TRIALS:-10}" --resolution "${ZL_RESOLUTION:-0.05}"
    --pause "${ZL_PAUSE:-2s}" --recovery "${ZL_RECOVERY:-15s}" --out "$dir/report.json")
  case "$kind" in
    pcrf)
      [[ "${STORE:-sqlite}" == postgres ]] && start_postgres
      start_pcrf "$dir" "${PEERS:-4}"
      target="$DIAMETER_PORT"
      args+=(--server-pid "$SERVER_PID" --provision "$API_URL") ;;
    echo)
      start_echo "$dir"
      target="$DIAMETER_PORT"
      args+=(--server-pid "$SERVER_PID") ;;
    cluster)
      start_postgres
      start_cluster "$dir" "${NODES:-2}"
      target="$AGENT_PORT"
      through_agent "$scenario" >"$dir/scenario.toml"
      scenario="$dir/scenario.toml"
      # Through every node, as an operator's provisioning would not wait
      # for the cluster's feed: every node knows every subscriber at the
      # first trial.
      for api in "${NODE_APIS[@]}"; do
        gen provision --scenario "$scenario" --api "$api" \
          --subscribers "${ZL_SUBSCRIBERS:-100000}" >/dev/null \
          || die "provisioning through $api failed"
      done
      for p in "${NODE_PIDS[@]}"; do args+=(--server-pid "$p"); done ;;
    other)
      # Another Gx PCRF, started and provisioned by the operator
      # (bench/versus.sh): its address and processes, nothing started.
      target_addr="$OTHER_TARGET"
      other_scenario "$scenario" >"$dir/scenario.toml"
      scenario="$dir/scenario.toml"
      for p in ${OTHER_PID//,/ }; do args+=(--server-pid "$p"); done ;;
    *) die "zero_loss_search: unknown kind $kind" ;;
  esac
  args+=(--scenario "$scenario" --target "${target_addr:-127.0.0.1:$target}")
  if [[ -n "$PG_TMP" ]]; then
    for p in $(postgres_pids); do args+=(--db-pid "$p"); done
  fi
  echo "== zero-loss: $kind${PG_TMP:+ on PostgreSQL}, from $start TPS ==" >&2
  # The trials' lines (stderr) both on the terminal and in trials.txt.
  if ! gen "${args[@]}" 2>&1 >"$dir/summary.txt" | tee "$dir/trials.txt" >&2; then
    echo "zero-loss search of $kind failed: $(tail -n 1 "$dir/trials.txt")" >&2
  fi
  if [[ $kind == cluster ]]; then
    TAKEN_OVER="$(cluster_counter pcrf_cluster_sessions_taken_over_total)"
    CONFLICTS="$(cluster_counter pcrf_cluster_conflicts_total)"
    NODE_REQUESTS="$(requests_per_node)"
    stop_cluster
  fi
  stop_server
  stop_postgres
  FOUND="$(sed -n 's/^zero-loss: \([0-9]*\) TPS.*/\1/p' "$dir/summary.txt")"
  FOUND="${FOUND:-none}"
  # The trial at that rate: "trial N: R TPS offered -> zero loss (achieved
  # A TPS, p99 X ms)", the last one of that rate.
  FOUND_P99="$(sed -n "s/^trial [0-9]*: $FOUND TPS offered -> zero loss (achieved [0-9]* TPS, p99 \([^)]*\))\$/\1/p" \
    "$dir/trials.txt" | tail -n 1)"
  FOUND_P99="${FOUND_P99:-n/a}"
}

# other_scenario FILE: FILE with the Destination-Realm another PCRF
# expects (OTHER_REALM, when set), on stdout.
other_scenario() {
  if [[ -n "${OTHER_REALM:-}" ]]; then
    sed "s/^destination_realm = .*/destination_realm = \"$OTHER_REALM\"/" "$1"
  else
    cat "$1"
  fi
}

# rss_kib PID: the process's resident memory now, KiB (VmRSS).
rss_kib() {
  sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB$/\1/p' "/proc/$1/status"
}

# open_closed_sessions API_URL: "OPEN CLOSED", the Gx sessions `pcrf serve`
# holds in memory now (its pcrf_sessions gauges).
open_closed_sessions() {
  local m
  m="$(curl -sf "$1/metrics")" || { echo "? ?"; return; }
  echo "$(sed -n 's/^pcrf_sessions{state="open"} \([0-9]*\)$/\1/p' <<<"$m") $(sed -n 's/^pcrf_sessions{state="closed"} \([0-9]*\)$/\1/p' <<<"$m")"
}

# median VALUE...: the median of numbers (the lower middle of an even
# count; "n/a" for none). Non-numbers are left out.
median() {
  local v=() x
  for x in "$@"; do [[ "$x" =~ ^[0-9]+(\.[0-9]+)?$ ]] && v+=("$x"); done
  ((${#v[@]} > 0)) || { echo n/a; return; }
  printf '%s\n' "${v[@]}" | sort -g | sed -n "$(((${#v[@]} + 1) / 2))p"
}

# field DIR JQ SCALE: a figure of a run's report (DIR/report.json), rounded
# to 1/SCALE ("n/a" when missing). Needs jq.
field() {
  [[ -f "$1/report.json" ]] || { echo n/a; return; }
  jq -r "($2) // \"n/a\" | if type == \"number\" then (. * $3 | round / $3) else . end" "$1/report.json" 2>/dev/null \
    || echo n/a
}

# calc EXPR [DECIMALS]: awk arithmetic on decimal numbers ("n/a" if any is
# missing).
calc() {
  [[ "$1" == *n/a* || "$1" == *none* ]] && { echo n/a; return; }
  awk "BEGIN { printf \"%.${2:-2}f\", $1 }" 2>/dev/null || echo n/a
}

# runs VALUE...: "a / b / c", the values of the runs.
runs() { local IFS=/; echo "$*" | sed 's#/# / #g'; }
