#!/usr/bin/env bash
# Start-up time with N open sessions to recover (default 1,000,000): how
# long `pcrf serve` takes from exec to answering, when its store holds that
# many open Gx sessions, on the embedded store or on PostgreSQL.
#
# The sessions are copies of one real session: a release `pcrf serve` on a
# fresh store opens it from `pcrf client gx` (with usage monitoring, so the
# record carries grants and a stored answer, about the size of a busy one),
# then the store is filled with N copies under other Session-Ids by SQL.
# Each run then starts the server on that store and times it until
# /v1/health answers (the API starts after recovery), and reads its RSS.
#
#   bench/recovery.sh                            # embedded store, 3 runs
#   STORE=postgres DATABASE_URL=postgres://... bench/recovery.sh
#   N=100000 RUNS=1 BUILD=0 bench/recovery.sh
#
# Env: N, RUNS (3), STORE (sqlite|postgres), DATABASE_URL (postgres: a
# database this script may create a schema in; the schema is dropped at
# the end), KEEP=1 keeps the work directory.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

N="${N:-1000000}"
RUNS="${RUNS:-3}"
STORE="${STORE:-sqlite}"
need curl curl
need python3 python3
[[ $STORE == sqlite || $STORE == postgres ]] || die "STORE must be sqlite or postgres"
if [[ $STORE == postgres ]]; then
  need psql postgresql-client
  [[ -n "${DATABASE_URL:-}" ]] || die "STORE=postgres needs DATABASE_URL"
fi

build_release pcrf

WORK="$(mktemp -d "${TMPDIR:-/tmp}/pcrf-recovery.XXXXXX")"
SCHEMA="recovery_$$"
PID=""
stop() {
  if [[ -n "$PID" ]] && kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
  fi
  PID=""
}
cleanup() {
  stop
  if [[ $STORE == postgres ]]; then
    psql "$DATABASE_URL" -X -q -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" >/dev/null 2>&1 || true
  fi
  if [[ "${KEEP:-0}" != 1 ]]; then rm -rf "$WORK"; else echo "kept $WORK" >&2; fi
}
trap cleanup EXIT

DIAMETER_PORT="$(free_port)"
API_PORT="$(free_port)"
API="http://127.0.0.1:$API_PORT"
if [[ $STORE == postgres ]]; then
  psql "$DATABASE_URL" -X -q -c "CREATE SCHEMA $SCHEMA" >/dev/null
  sep='?'; [[ $DATABASE_URL == *\?* ]] && sep='&'
  URL="${DATABASE_URL}${sep}options=-csearch_path%3D$SCHEMA"
  STORE_SECTION="$(postgres_store_section "$URL")"
else
  STORE_SECTION="$(sqlite_store_section "$WORK/data")"
fi
pcrf_config "$DIAMETER_PORT" "$API_PORT" "$STORE_SECTION" pgw.bench.test >"$WORK/pcrf.toml"

start() {
  "$PCRF_BIN" serve --config "$WORK/pcrf.toml" >>"$WORK/pcrf.out" 2>>"$WORK/pcrf.err" &
  PID=$!
}
healthy() { curl -sf "$API/v1/health" >/dev/null 2>&1; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

echo "opening one real session (template)" >&2
start
for _ in $(seq 200); do healthy && break; sleep 0.1; done
healthy || die "pcrf serve did not start: $(tail -5 "$WORK/pcrf.err")"
IMSI=001010000000001
curl -sf -X PUT "$API/v1/subscribers/$IMSI" -H 'content-type: application/json' \
  -d '{"msisdn":"491700000001","plan":"basic","services":["vip"]}' >/dev/null
"$PCRF_BIN" client gx --server "127.0.0.1:$DIAMETER_PORT" --origin-host pgw.bench.test \
  --origin-realm bench.test --imsi "$IMSI" --updates 1 --keep-session >"$WORK/client.out" 2>&1 \
  || die "client failed: $(tail -5 "$WORK/client.out")"
stop

echo "filling the store with $N open sessions" >&2
t0=$(date +%s.%N)
if [[ $STORE == postgres ]]; then
  psql "$URL" -X -q -v ON_ERROR_STOP=1 <<EOF
INSERT INTO sessions (id, subscriber, state, pcef_host, updated_ms, closed_ms, data)
SELECT 'bench;' || g, t.subscriber, t.state, t.pcef_host, t.updated_ms, t.closed_ms,
       convert_to(replace(convert_from(t.data, 'UTF8'),
                          '"id":"' || t.id || '"', '"id":"bench;' || g || '"'), 'UTF8')
FROM sessions t, generate_series(1, $N) g
WHERE t.state = 'open';
ANALYZE sessions;
EOF
else
  python3 - "$WORK/data/pcrf.db" "$N" <<'EOF'
import sqlite3, sys
db, n = sys.argv[1], int(sys.argv[2])
c = sqlite3.connect(db)
tid, sub, state, host, upd, closed, data = c.execute(
    "SELECT id, subscriber, state, pcef_host, updated_ms, closed_ms, data FROM sessions WHERE state = 'open'").fetchone()
text = bytes(data).decode()
old = '"id":"%s"' % tid
assert old in text
def rows():
    for g in range(1, n + 1):
        sid = "bench;%d" % g
        yield (sid, sub, state, host, upd, closed, text.replace(old, '"id":"%s"' % sid).encode())
with c:
    c.executemany("INSERT INTO sessions (id, subscriber, state, pcef_host, updated_ms, closed_ms, data) VALUES (?,?,?,?,?,?,?)", rows())
c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
c.close()
EOF
fi
t1=$(date +%s.%N)
echo "filled in $(elapsed "$t0" "$t1") s" >&2

results=()
for run in $(seq "$RUNS"); do
  sync
  t0=$(date +%s.%N)
  start
  until healthy; do
    kill -0 "$PID" 2>/dev/null || die "pcrf serve exited: $(tail -5 "$WORK/pcrf.err")"
    sleep 0.05
  done
  t1=$(date +%s.%N)
  rss_kb=$(awk '/VmRSS/ {print $2}' "/proc/$PID/status")
  open=$(curl -sf "$API/metrics" | awk '/^pcrf_sessions\{state="open"\}/ {print $2}')
  stop
  secs=$(elapsed "$t0" "$t1")
  echo "run $run: start-up $secs s, $open open sessions recovered, RSS $((rss_kb / 1024)) MiB"
  results+=("$secs")
done
median=$(printf '%s\n' "${results[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
echo "store $STORE, $N sessions: median start-up $median s over $RUNS runs"
