# Shared by the chaos scripts: release binaries, a `pcrf serve`
# on free loopback ports with usage monitoring on, restartable on the same
# data (embedded SQLite or a throwaway PostgreSQL cluster), and the load
# generator with retransmission and an answer log. Source it; do not run it.
# Everything here talks to 127.0.0.1 only.

CHAOS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../bench/lib.sh
source "$CHAOS_ROOT/bench/lib.sh"

PCRF_PID=""

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

now_ms() { date +%s%3N; }

# chaos_workdir NAME [PID_VARIABLE...]: makes the script's work directory
# ($work) and its clean-up at exit, written once for every chaos script.
# Each PID_VARIABLE names a variable that holds the PID of a background
# process while one runs (emptied here); at exit those still set are
# stopped, then the server and the throwaway PostgreSQL, then the
# function chaos_at_exit runs if the script defines one, and the work
# directory is removed (KEEP=1 keeps it).
chaos_workdir() {
  work="$(mktemp -d "${TMPDIR:-/tmp}/pcrf-chaos-$1.XXXXXX")"
  shift
  CHAOS_PID_VARIABLES=("$@")
  local v
  for v in "$@"; do printf -v "$v" '%s' ''; done
  trap chaos_cleanup EXIT
  trap 'exit 130' INT TERM
}

chaos_cleanup() {
  set +e
  local v pid
  for v in "${CHAOS_PID_VARIABLES[@]}"; do
    pid="${!v}"
    [[ -n "$pid" ]] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  done
  chaos_stop
  stop_postgres
  declare -F chaos_at_exit >/dev/null && chaos_at_exit
  if [[ "${KEEP:-0}" == 1 ]]; then echo "work directory kept: $work" >&2; else rm -rf "$work"; fi
}

# check_kill_cycles: the settings every kill-cycle script takes (STORE,
# CYCLES, MIN_UP, MAX_UP), refused with a clear message when out of range.
check_kill_cycles() {
  [[ $STORE == sqlite || $STORE == postgres ]] || die "STORE must be sqlite or postgres"
  ((CYCLES >= 1 && CYCLES <= 1000)) || die "CYCLES must be 1..1000"
  ((MIN_UP >= 1 && MAX_UP >= MIN_UP && MAX_UP <= 60)) || die "need 1 <= MIN_UP <= MAX_UP <= 60"
}

# chaos_config WORK STORE [EXTRA_PEERS]: writes WORK/pcrf.toml; STORE is
# sqlite (data in WORK/data unless DATA_DIR is set) or postgres (the cluster
# of start_postgres). Allowed peers: the generator's pgw-1..8.bench.test
# and EXTRA_PEERS more named bad-1..N.bench.test (chaos/peers.sh).
# RETENTION sets [sessions].retention_secs (how long closed sessions are
# kept; the server's default is a day); MAX_PENDING, LOG_LEVEL likewise.
chaos_config() {
  local work="$1" store="$2" extra="${3:-0}" i
  DIAMETER_PORT="${DIAMETER_PORT:-$(free_port)}"
  API_PORT="${API_PORT:-$(free_port)}"
  API_URL="http://127.0.0.1:$API_PORT"
  {
    echo '[node]'
    echo 'origin_host = "pcrf.pcrf.test"'
    echo 'origin_realm = "pcrf.test"'
    echo '[diameter]'
    echo "listen = \"127.0.0.1:$DIAMETER_PORT\""
    [[ -n "${MAX_PENDING:-}" ]] && echo "max_pending_requests = $MAX_PENDING"
    for i in $(seq 8); do
      echo '[[peers]]'
      echo "origin_host = \"pgw-$i.bench.test\""
      echo 'addresses = ["127.0.0.1"]'
    done
    for i in $(seq "$extra"); do
      echo '[[peers]]'
      echo "origin_host = \"bad-$i.bench.test\""
      echo 'addresses = ["127.0.0.1"]'
    done
    echo '[store]'
    if [[ $store == postgres ]]; then
      echo 'kind = "postgres"'
      echo "url = \"$PG_URL\""
    else
      echo 'kind = "sqlite"'
      echo "path = \"${DATA_DIR:-$work/data}\""
      echo 'durability = "full"'
    fi
    if [[ -n "${RETENTION:-}" ]]; then
      echo '[sessions]'
      echo "retention_secs = $RETENTION"
    fi
    echo '[policy]'
    echo "path = \"$CHAOS_ROOT/policies/default.lua\""
    echo 'watch = false'
    echo '[usage]'
    echo "path = \"$CHAOS_ROOT/config/usage.toml\""
    echo '[api]'
    echo "listen = \"127.0.0.1:$API_PORT\""
    echo '[log]'
    echo "level = \"${LOG_LEVEL:-warn}\""
  } >"$work/pcrf.toml"
}

# chaos_start WORK: `pcrf serve` on WORK/pcrf.toml; logs appended to
# WORK/pcrf.err across restarts; sets PCRF_PID; returns non-zero if it does
# not listen within 60 s.
chaos_start() {
  local work="$1"
  echo "--- start $(date +%T.%N)" >>"$work/pcrf.err"
  "$BIN/pcrf" serve --config "$work/pcrf.toml" >>"$work/pcrf.out" 2>>"$work/pcrf.err" &
  PCRF_PID=$!
  local deadline=$((SECONDS + 60))
  while ((SECONDS < deadline)); do
    if ! kill -0 "$PCRF_PID" 2>/dev/null; then
      log "pcrf serve exited: $(tail -5 "$work/pcrf.err")"
      return 1
    fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$DIAMETER_PORT") 2>/dev/null \
      && (exec 3<>"/dev/tcp/127.0.0.1/$API_PORT") 2>/dev/null; then
      return 0
    fi
    sleep 0.05
  done
  log "pcrf serve did not listen within 60 s: $(tail -5 "$work/pcrf.err")"
  return 1
}

# chaos_kill9: SIGKILL the server and reap it.
chaos_kill9() {
  if [[ -n "$PCRF_PID" ]] && kill -0 "$PCRF_PID" 2>/dev/null; then
    kill -KILL "$PCRF_PID" 2>/dev/null || true
    wait "$PCRF_PID" 2>/dev/null || true
  fi
  PCRF_PID=""
}

# chaos_stop: SIGTERM (graceful), then SIGKILL after 20 s.
chaos_stop() {
  if [[ -n "$PCRF_PID" ]] && kill -0 "$PCRF_PID" 2>/dev/null; then
    kill -TERM "$PCRF_PID" 2>/dev/null || true
    local i
    for i in $(seq 200); do
      kill -0 "$PCRF_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$PCRF_PID" 2>/dev/null || true
    wait "$PCRF_PID" 2>/dev/null || true
  fi
  PCRF_PID=""
}

# provision_population SUBSCRIBERS: PUTs the seed scenario's subscribers.
provision_population() {
  "$BIN/pcrf-bench" provision --scenario "$CHAOS_ROOT/bench/scenarios/seed.toml" \
    --api "$API_URL" --subscribers "$1" >/dev/null
}

# rss_kb PID: resident set size in kB (0 when the process is gone).
rss_kb() {
  awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0
}
