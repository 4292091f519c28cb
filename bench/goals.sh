#!/usr/bin/env bash
# Every goal of the hot path measured in one run on this machine, printed as
# markdown ready for BENCHMARKS.md (and kept in bench/results/goals.md, the
# JSON reports under bench/results/goals/). What it measures, and how:
#
# 1. Seed scenario (bench/scenarios/seed.toml) at RATE TPS for DURATION after
#    the scenario's warm-up, against `pcrf serve` (embedded store, durability
#    full, shipped policy and usage file) and then the echo server
#    (`pcrf-bench echo-server`: same generator and transport, a fixed CCA),
#    RUNS alternated pairs. Per run, over the measured window: the server's
#    CPU per transaction (utime + stime from /proc/<pid>/stat at the window's
#    edges, divided by the requests answered), latency p50 and p99 from each
#    request's intended send time, Apdex (T = 5 ms) and the share answered
#    2001, all commands together. The ratio pcrf/echo is taken per pair.
# 2. Resident memory after the run, sessions excluded: `pcrf serve`'s VmRSS
#    once the run's drain is over, minus the open sessions it still holds
#    times the per-session figure of 4 (a closed session leaves memory once
#    its CCR-T is committed).
# 3. Zero-loss throughput and core scaling: the search of bench/zero-loss.sh
#    (seed-fast.toml; a trial passes with every answer 2xxx, p99 <= P99_BOUND
#    and >= 99% of the offered rate achieved; trials of ZL_DURATION) against
#    pcrf and the echo server with the server pinned (taskset) to 1, 2, 4, 8
#    cores, those the machine has; the generator gets the other cores, and on
#    the row with all of them (2 on a 2-CPU machine) it shares them, which the
#    table says. The zero-loss goal is the row with 2 server cores.
# 4. Memory per open session: a fresh `pcrf serve`, OPEN_SESSIONS subscribers
#    provisioned, VmRSS at rest (R0); the generator opens sessions
#    (bench/scenarios/open-sessions.toml: CCR-I with the monitoring key, an
#    hour's hold) until the server holds OPEN_SESSIONS open ones and is then
#    killed (no CCR-T is sent); after SETTLE seconds at rest, VmRSS (RN):
#    (RN - R0) / open sessions.
# 5. PostgreSQL: 1 and 2 again with [store] kind = "postgres" on a throwaway
#    cluster started for each run on this machine (Debian's settings, fsync
#    on; PG_CONF to include another postgresql.conf), on the server's CPUs;
#    PostgreSQL's CPU is that of the postmaster and its children
#    (/proc/<pid>/stat, as for the server), and the ratio to the echo server
#    is (PCRF + PostgreSQL) / echo, with the echo figure of 1. Then the
#    zero-loss search on the pinning of the 2-core row.
#
# Each figure is the median of RUNS runs (the runs are listed beside it).
# The seed, memory and PostgreSQL runs pin the server to CPUs 0-1 and the
# generator to the rest when the machine has more than 2 CPUs (SERVER_CPUS
# and GEN_CPUS override); on 2 CPUs nothing is pinned and the generator
# shares them (the header says so). Measure on a quiet machine: anything
# else running moves every figure.
#
#   bench/goals.sh                                        # everything (about an hour on 2 CPUs)
#   BUILD=0 RUNS=1 DURATION=5s ZL_DURATION=2s OPEN_SESSIONS=5000 bench/goals.sh   # a quick check that it works
#   PARTS="seed memory" bench/goals.sh                    # some parts only
#
# Environment: BUILD (1; 0 uses existing release binaries), PCRF_BIN, BENCH_BIN, RUNS (3), PARTS ("seed scaling
# memory postgres"), RATE (3000), DURATION (60s), WARMUP (the scenario's: 6s), SUBSCRIBERS (20000), PEERS (4),
# CORES ("1 2 4 8"), ZL_MIN (2000), ZL_MAX (400000), ZL_DURATION (10s), ZL_WARMUP (2s), P99_BOUND (10ms),
# ZL_MAX_TRIALS (10), ZL_RECOVERY (15s), ZL_SUBSCRIBERS (100000), OPEN_SESSIONS (100000), OPEN_RATE (6000, so
# 2000 CCR-I/s), SETTLE (3), PG_CONF, COMMIT_WINDOW_US, SERVER_CPUS, GEN_CPUS.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need jq jq
need curl curl
need awk gawk

for a in "$@"; do
  case "$a" in
    -h|--help) sed -n '2,56p' "$0"; exit 0 ;;
    *) die "unknown argument $a" ;;
  esac
done
RUNS="${RUNS:-3}"
PARTS="${PARTS:-seed scaling memory postgres}"
RATE="${RATE:-3000}"
DURATION="${DURATION:-60s}"
SUBSCRIBERS="${SUBSCRIBERS:-20000}"
PEERS="${PEERS:-4}"
CORES="${CORES:-1 2 4 8}"
ZL_MIN="${ZL_MIN:-2000}"
OPEN_SESSIONS="${OPEN_SESSIONS:-100000}"
OPEN_RATE="${OPEN_RATE:-6000}"
SETTLE="${SETTLE:-3}"
SEED="$BENCH_ROOT/bench/scenarios/seed.toml"
OPEN_SCENARIO="$BENCH_ROOT/bench/scenarios/open-sessions.toml"
has() { [[ " $PARTS " == *" $1 "* ]]; }

build_release pcrf-bench pcrf
n="$(nproc)"
((n > 2)) && need taskset util-linux
work="$(mktemp -d "${TMPDIR:-/tmp}/pcrf-goals.XXXXXX")"
GEN_BG=""
cleanup() {
  if [[ -n "$GEN_BG" ]]; then kill -KILL "$GEN_BG" 2>/dev/null || true; fi
  stop_server
  stop_postgres
  rm -rf "$work"
}
trap cleanup EXIT
out="$BENCH_ROOT/bench/results/goals"
mkdir -p "$out"
started=$SECONDS

# The pinning of the seed, memory and PostgreSQL runs.
pin_default() {
  if [[ -n "${SERVER_CPUS:-}" || -n "${GEN_CPUS:-}" ]]; then set_pinning
  elif ((n > 2)); then set_pinning 0-1 "2-$((n - 1))"
  else set_pinning all all; fi
}
cpu_range() { if (($1 == $2)); then echo "$1"; else echo "$1-$2"; fi; }
# pin_cores K: the server on CPUs 0..K-1, the generator on the others (or
# sharing them all when K is every CPU).
pin_cores() {
  local k="$1"
  if ((k >= n)); then set_pinning "$(cpu_range 0 $((n - 1)))" all
  else set_pinning "$(cpu_range 0 $((k - 1)))" "$(cpu_range "$k" $((n - 1)))"; fi
}

# met VALUE OP LIMIT: yes / no (n/a when VALUE is not a number).
met() {
  [[ "$1" =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo n/a; return; }
  awk -v v="$1" -v l="$3" "BEGIN { print (v $2 l) ? \"yes\" : \"no\" }"
}

# seed_run KIND DIR: one seed-scenario run against pcrf (on STORE) or echo;
# the report in DIR/report.json, and for pcrf "RSS_KiB OPEN CLOSED" after
# the drain in DIR/after.txt.
seed_run() {
  local kind="$1" dir="$2" args p
  mkdir -p "$dir"
  [[ $kind == pcrf && "${STORE:-sqlite}" == postgres ]] && start_postgres
  if [[ $kind == pcrf ]]; then start_pcrf "$dir" "$PEERS"; else start_echo "$dir"; fi
  args=(run --scenario "$SEED" --target "127.0.0.1:$DIAMETER_PORT" --peers "$PEERS"
        --subscribers "$SUBSCRIBERS" --rate "$RATE" --duration "$DURATION"
        --server-pid "$SERVER_PID" --out "$dir/report.json")
  [[ -n "${WARMUP:-}" ]] && args+=(--warmup "$WARMUP")
  [[ -n "$API_URL" ]] && args+=(--server-metrics "$API_URL/metrics" --provision "$API_URL")
  if [[ -n "$PG_TMP" ]]; then
    for p in $(postgres_pids); do args+=(--db-pid "$p"); done
  fi
  echo "== seed: $kind${PG_TMP:+ on PostgreSQL} ==" >&2
  gen "${args[@]}" >"$dir/summary.txt" || echo "seed run of $kind failed: $(tail -3 "$dir/summary.txt")" >&2
  if [[ -n "$API_URL" ]]; then
    sleep 1
    echo "$(rss_kib "$SERVER_PID") $(open_closed_sessions "$API_URL")" >"$dir/after.txt"
  fi
  stop_server
  stop_postgres
  [[ -f "$dir/report.json" ]] && cp "$dir/report.json" "$out/$(basename "$dir").json"
  return 0
}

cpu_of() { field "$1" '.server_cpu.cpu_us_per_txn' 10; }
db_of() { field "$1" '.db_cpu.cpu_us_per_txn' 10; }
p50_of() { field "$1" '.total.latency.p50_ms' 100; }
p99_of() { field "$1" '.total.latency.p99_ms' 100; }
apdex_of() { field "$1" '.total.apdex.score' 1000; }
ok_of() { field "$1" '(.total.results["2001"] // 0) / .total.sent * 100' 100; }
commits_of() { field "$1" '.server_store.commits_per_100_transactions' 10; }

# Empty, not unset: a part run without the seed part (PARTS) reads them
# under `set -u`.
S_CPU=() S_P50=() S_P99=() S_APDEX=() S_OK=() S_COMMITS=() S_RSS=() S_OPEN=()
E_CPU=() E_P50=() E_P99=() E_APDEX=() E_OK=() RATIO=()
G_CPU=() G_DB=() G_SUM=() G_P50=() G_P99=() G_APDEX=() G_OK=() G_RSS=() G_OPEN=() G_RATIO=() G_ZL=()
declare -A ZL
MEM_B=()

# 1 and 2: the seed scenario, pcrf and echo alternated.
if has seed; then
  pin_default
  for r in $(seq "$RUNS"); do
    seed_run pcrf "$work/seed-pcrf-$r"
    seed_run echo "$work/seed-echo-$r"
    d="$work/seed-pcrf-$r"; e="$work/seed-echo-$r"
    S_CPU+=("$(cpu_of "$d")"); S_P50+=("$(p50_of "$d")"); S_P99+=("$(p99_of "$d")")
    S_APDEX+=("$(apdex_of "$d")"); S_OK+=("$(ok_of "$d")"); S_COMMITS+=("$(commits_of "$d")")
    rss=""; open=""
    read -r rss open _ <"$d/after.txt" || true
    S_RSS+=("${rss:-n/a}"); S_OPEN+=("${open:-n/a}")
    E_CPU+=("$(cpu_of "$e")"); E_P50+=("$(p50_of "$e")"); E_P99+=("$(p99_of "$e")")
    E_APDEX+=("$(apdex_of "$e")"); E_OK+=("$(ok_of "$e")")
    RATIO+=("$(calc "${S_CPU[-1]} / ${E_CPU[-1]}")")
  done
fi

# 3: zero-loss against the server's cores, pcrf then echo.
rows=()
for k in $CORES; do ((k >= 1 && k < n)) && rows+=("$k"); done
if ((n > 1)) && [[ " $CORES " == *" $n "* ]]; then rows+=("$n"); fi
((${#rows[@]} > 0)) || rows=("$n")
if has scaling; then
  for r in $(seq "$RUNS"); do
    next="$ZL_MIN"
    for k in "${rows[@]}"; do
      pin_cores "$k"
      # pcrf from 0.9 of its figure on fewer cores, the echo server (the
      # ceiling) from pcrf's figure on these.
      zero_loss_search pcrf "$work/zl-pcrf-$k-$r" "$next"
      pf="$FOUND"
      ZL[pcrf,$k]+="$pf "
      cp "$work/zl-pcrf-$k-$r/report.json" "$out/zero-loss-pcrf-$k-cores-$r.json" 2>/dev/null || true
      start="$next"; [[ "$pf" =~ ^[0-9]+$ ]] && start="$pf"
      zero_loss_search echo "$work/zl-echo-$k-$r" "$start"
      ZL[echo,$k]+="$FOUND "
      cp "$work/zl-echo-$k-$r/report.json" "$out/zero-loss-echo-$k-cores-$r.json" 2>/dev/null || true
      if [[ "$pf" =~ ^[0-9]+$ ]] && ((pf * 9 / 10 > next)); then next=$((pf * 9 / 10)); fi
    done
  done
fi

# 4: memory per open session.
if has memory; then
  pin_default
  for r in $(seq "$RUNS"); do
    dir="$work/memory-$r"
    mkdir -p "$dir"
    start_pcrf "$dir" "$PEERS"
    echo "== memory: provisioning $OPEN_SESSIONS subscribers ==" >&2
    gen provision --scenario "$OPEN_SCENARIO" --api "$API_URL" --subscribers "$OPEN_SESSIONS" >&2
    sleep "$SETTLE"
    r0="$(rss_kib "$SERVER_PID")"
    # Long enough to open them all at the offered rate, three times over.
    secs=$((OPEN_SESSIONS * 3 * 3 / OPEN_RATE + 30))
    echo "== memory: opening $OPEN_SESSIONS sessions ==" >&2
    "${GEN_PIN[@]}" "$BENCH_BIN" run --scenario "$OPEN_SCENARIO" --target "127.0.0.1:$DIAMETER_PORT" \
      --peers "$PEERS" --subscribers "$OPEN_SESSIONS" --rate "$OPEN_RATE" --warmup 0s \
      --duration "${secs}s" >"$dir/gen.txt" 2>&1 &
    GEN_BG=$!
    deadline=$((SECONDS + secs))
    open=0
    while ((SECONDS < deadline)) && kill -0 "$GEN_BG" 2>/dev/null; do
      read -r open _ <<<"$(open_closed_sessions "$API_URL")"
      [[ "$open" =~ ^[0-9]+$ ]] || open=0
      ((open >= OPEN_SESSIONS)) && break
      sleep 0.5
    done
    # Killed, so that it sends no CCR-T: the sessions stay open.
    kill -KILL "$GEN_BG" 2>/dev/null || true
    wait "$GEN_BG" 2>/dev/null || true
    GEN_BG=""
    sleep "$SETTLE"
    read -r open _ <<<"$(open_closed_sessions "$API_URL")"
    rn="$(rss_kib "$SERVER_PID")"
    echo "$r0 $rn $open" >"$dir/memory.txt"
    echo "memory run $r: RSS $r0 KiB with 0 sessions, $rn KiB with $open open" >&2
    if [[ "$open" =~ ^[0-9]+$ ]] && ((open > 0)); then
      MEM_B+=("$(calc "($rn - $r0) * 1024 / $open" 0)")
    else
      MEM_B+=("n/a")
    fi
    stop_server
  done
fi

# 5: PostgreSQL.
if has postgres; then
  pin_default
  for r in $(seq "$RUNS"); do
    d="$work/seed-pcrf-postgres-$r"
    STORE=postgres seed_run pcrf "$d"
    G_CPU+=("$(cpu_of "$d")"); G_DB+=("$(db_of "$d")")
    G_SUM+=("$(calc "${G_CPU[-1]} + ${G_DB[-1]}" 1)")
    G_P50+=("$(p50_of "$d")"); G_P99+=("$(p99_of "$d")"); G_APDEX+=("$(apdex_of "$d")"); G_OK+=("$(ok_of "$d")")
    rss=""; open=""
    read -r rss open _ <"$d/after.txt" || true
    G_RSS+=("${rss:-n/a}"); G_OPEN+=("${open:-n/a}")
    if ((${#E_CPU[@]} >= r)); then G_RATIO+=("$(calc "${G_SUM[-1]} / ${E_CPU[r - 1]}")"); fi
  done
  k=2; ((n < 2)) && k="$n"
  for r in $(seq "$RUNS"); do
    pin_cores "$k"
    STORE=postgres zero_loss_search pcrf "$work/zl-pcrf-postgres-$r" "$ZL_MIN"
    G_ZL+=("$FOUND")
    cp "$work/zl-pcrf-postgres-$r/report.json" "$out/zero-loss-pcrf-postgres-$r.json" 2>/dev/null || true
  done
fi

# The table.
per_session="$(median "${MEM_B[@]+"${MEM_B[@]}"}")"
# excluded RSS_LIST OPEN_LIST: MiB after the run minus the open sessions.
excluded() {
  local -n rs="$1" os="$2"
  local v=() i
  for i in "${!rs[@]}"; do
    if [[ "$per_session" =~ ^[0-9]+$ && "${os[i]}" =~ ^[0-9]+$ ]]; then
      v+=("$(calc "(${rs[i]} * 1024 - ${os[i]} * $per_session) / 1048576" 1)")
    else
      v+=("$(calc "${rs[i]} / 1024" 1)")
    fi
  done
  echo "${v[@]}"
}
m() { median "$@"; }
table="$work/goals.md"
{
  model="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
  build="$(cd "$BENCH_ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "Measured by \`bench/goals.sh\`, $(date -u '+%Y-%m-%d %H:%M UTC'), build \`$build\`, $n CPUs ($model), load average at the end $(cut -d' ' -f1-3 /proc/loadavg); medians of $RUNS runs (the runs in brackets)."
  if ((n > 2)); then
    echo "Seed, memory and PostgreSQL runs: server on CPUs ${SERVER_CPUS:-0-1}, generator on ${GEN_CPUS:-2-$((n - 1))}."
  else
    echo "On $n CPUs nothing is pinned for the seed, memory and PostgreSQL runs: the generator shares the CPUs with the server (and PostgreSQL)."
  fi
  echo
  if has seed; then
    ratio_m="$(m "${RATIO[@]}")"
    echo "| seed scenario, $RATE TPS, $DURATION | \`pcrf serve\` | echo server | pcrf / echo |"
    echo "|---|---:|---:|---:|"
    echo "| CPU per transaction (µs) | **$(m "${S_CPU[@]}")** ($(runs "${S_CPU[@]}")) | $(m "${E_CPU[@]}") ($(runs "${E_CPU[@]}")) | **$ratio_m** ($(runs "${RATIO[@]}")) |"
    echo "| latency p50 (ms) | $(m "${S_P50[@]}") | $(m "${E_P50[@]}") | |"
    echo "| latency p99 (ms) | **$(m "${S_P99[@]}")** ($(runs "${S_P99[@]}")) | $(m "${E_P99[@]}") | |"
    echo "| Apdex (T = 5 ms) | **$(m "${S_APDEX[@]}")** ($(runs "${S_APDEX[@]}")) | $(m "${E_APDEX[@]}") | |"
    echo "| answered 2001 (%) | $(m "${S_OK[@]}") | $(m "${E_OK[@]}") | |"
    echo "| store commits per 100 transactions | $(m "${S_COMMITS[@]}") | | |"
    echo
  fi
  if has scaling; then
    echo "| zero-loss TPS (seed-fast, p99 <= ${P99_BOUND:-10ms}, trials of ${ZL_DURATION:-10s}) | server cores | generator cores | \`pcrf serve\` | echo server | pcrf / echo |"
    echo "|---|---:|---:|---:|---:|---:|"
    for k in "${rows[@]}"; do
      read -ra pv <<<"${ZL[pcrf,$k]:-}"; read -ra ev <<<"${ZL[echo,$k]:-}"
      if ((k >= n)); then g="shares the $k"; else g="$((n - k))"; fi
      echo "| | $k | $g | $(m "${pv[@]+"${pv[@]}"}") ($(runs "${pv[@]+"${pv[@]}"}")) | $(m "${ev[@]+"${ev[@]}"}") ($(runs "${ev[@]+"${ev[@]}"}")) | $(calc "$(m "${pv[@]+"${pv[@]}"}") / $(m "${ev[@]+"${ev[@]}"}")") |"
    done
    echo
  fi
  if has postgres; then
    echo "| seed scenario on PostgreSQL, $RATE TPS, $DURATION | PCRF | PostgreSQL | PCRF + PostgreSQL | / echo |"
    echo "|---|---:|---:|---:|---:|"
    echo "| CPU per transaction (µs) | $(m "${G_CPU[@]}") ($(runs "${G_CPU[@]}")) | $(m "${G_DB[@]}") ($(runs "${G_DB[@]}")) | **$(m "${G_SUM[@]}")** | **$(m "${G_RATIO[@]+"${G_RATIO[@]}"}")** |"
    echo
    echo "PostgreSQL: p50 $(m "${G_P50[@]}") ms, p99 $(m "${G_P99[@]}") ms, Apdex $(m "${G_APDEX[@]}"), $(m "${G_OK[@]}")% answered 2001; zero-loss $(m "${G_ZL[@]}") TPS ($(runs "${G_ZL[@]}"))."
    echo
  fi

  # The goals, one line each.
  k2=2; ((n < 2)) && k2="$n"
  read -ra p1 <<<"${ZL[pcrf,1]:-}"; read -ra p2 <<<"${ZL[pcrf,$k2]:-}"; read -ra e2 <<<"${ZL[echo,$k2]:-}"
  read -ra p8 <<<"${ZL[pcrf,8]:-}"
  zl_ratio="$(calc "$(m "${p2[@]+"${p2[@]}"}") / $(m "${e2[@]+"${e2[@]}"}")")"
  sc21="$(calc "$(m "${p2[@]+"${p2[@]}"}") / $(m "${p1[@]+"${p1[@]}"}")")"
  sc82="$(calc "$(m "${p8[@]+"${p8[@]}"}") / $(m "${p2[@]+"${p2[@]}"}")")"
  mem_kib="$(calc "$per_session / 1024")"
  read -ra s_ex <<<"$(excluded S_RSS S_OPEN)"
  read -ra g_ex <<<"$(excluded G_RSS G_OPEN)"
  echo "| goal | measured | target | met |"
  echo "|---|---:|---:|---|"
  if has seed; then
    echo "| seed, $RATE TPS: CPU per transaction, pcrf / echo | $(m "${RATIO[@]}") | <= 3 | $(met "$(m "${RATIO[@]}")" "<=" 3) |"
    echo "| seed, $RATE TPS: p99 | $(m "${S_P99[@]}") ms | <= 1 ms | $(met "$(m "${S_P99[@]}")" "<=" 1) |"
    echo "| seed, $RATE TPS: Apdex (T = 5 ms) | $(m "${S_APDEX[@]}") | >= 0.999 | $(met "$(m "${S_APDEX[@]}")" ">=" 0.999) |"
  fi
  if has scaling; then
    echo "| zero-loss, server on $k2 cores: pcrf / echo | $zl_ratio | >= 0.5 | $(met "$zl_ratio" ">=" 0.5) |"
    echo "| zero-loss, server on $k2 cores / on 1 | $sc21 | >= 1.8 | $(met "$sc21" ">=" 1.8)$( ((k2 >= n)) && echo " (the generator shares the $n CPUs)") |"
    if ((n > 8)); then echo "| zero-loss, server on 8 cores / on 2 | $sc82 | >= 3 | $(met "$sc82" ">=" 3) |"; fi
  fi
  if has memory; then
    echo "| memory per open session | $mem_kib KiB ($(runs "${MEM_B[@]}") bytes; $OPEN_SESSIONS sessions) | <= 2 KiB | $(met "$mem_kib" "<=" 2) |"
  fi
  if has seed; then
    echo "| resident memory after the seed run, sessions excluded | $(m "${s_ex[@]+"${s_ex[@]}"}") MiB ($(runs "${s_ex[@]+"${s_ex[@]}"}")) | < 30 MiB | $(met "$(m "${s_ex[@]+"${s_ex[@]}"}")" "<" 30) |"
  fi
  if has postgres; then
    echo "| PostgreSQL, seed: (PCRF + PostgreSQL) CPU per transaction / echo | $(m "${G_RATIO[@]+"${G_RATIO[@]}"}") | <= 3 | $(met "$(m "${G_RATIO[@]+"${G_RATIO[@]}"}")" "<=" 3) |"
    echo "| PostgreSQL, seed: p99 | $(m "${G_P99[@]}") ms | <= 1 ms | $(met "$(m "${G_P99[@]}")" "<=" 1) |"
    echo "| PostgreSQL: resident memory after the seed run, sessions excluded | $(m "${g_ex[@]+"${g_ex[@]}"}") MiB | < 30 MiB | $(met "$(m "${g_ex[@]+"${g_ex[@]}"}")" "<" 30) |"
    if has scaling; then
      g_zl="$(calc "$(m "${G_ZL[@]}") / $(m "${e2[@]+"${e2[@]}"}")")"
      echo "| PostgreSQL, zero-loss, server on $k2 cores: pcrf / echo | $g_zl | >= 0.5 | $(met "$g_zl" ">=" 0.5) |"
    fi
  fi
} >"$table"
cp "$table" "$BENCH_ROOT/bench/results/goals.md"
cat "$table"
echo "elapsed: $((SECONDS - started)) s; reports in bench/results/goals/"
