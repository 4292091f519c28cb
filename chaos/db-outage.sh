#!/usr/bin/env bash
# Chaos: the store made unavailable under load, then restored: the database
# server stopped and started again, or the store's volume filled up and
# freed.
#
#   postgres: a throwaway PostgreSQL cluster; its server is stopped
#             (pg_ctl stop -m fast) after BEFORE s of load and started again
#             OUTAGE s later.
#   sqlite:   the data directory on a small tmpfs mounted by this script
#             (needs root); after BEFORE s of load the volume is filled up
#             with a file (disk full), which is removed OUTAGE s later.
#             Afterwards the server is killed (-9), the database checked
#             (PRAGMA integrity_check) and the server restarted on it.
#
# Both: the load (seed scenario with usage, RATE requests/s, answer log,
# retransmission of timeouts) runs throughout; then `pcrf-bench verify`
# checks that nothing acknowledged was lost and nothing counted twice.
# Reports the answers during the outage by Result-Code (5012 expected), the
# server's error log lines, whether it stayed up, and how long after the
# store came back the first request succeeded (recovery, no operator action).
#
#   chaos/db-outage.sh                 # both, one after the other
#   STORE=postgres chaos/db-outage.sh
#
# Environment: STORE (all | sqlite | postgres), RATE (300), SUBSCRIBERS
# (2000), BEFORE (10 s), OUTAGE (15 s), AFTER (20 s), TMPFS_MB (64), BUILD, KEEP.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

STORE="${STORE:-all}"
RATE="${RATE:-300}"
SUBSCRIBERS="${SUBSCRIBERS:-2000}"
BEFORE="${BEFORE:-10}"
OUTAGE="${OUTAGE:-15}"
AFTER="${AFTER:-20}"
TMPFS_MB="${TMPFS_MB:-64}"
case "$STORE" in all | sqlite | postgres) ;; *) die "STORE must be all, sqlite or postgres" ;; esac
((BEFORE + OUTAGE + AFTER <= 600)) || die "BEFORE + OUTAGE + AFTER must be at most 600 s"

build_release pcrf pcrf-bench
MOUNTED=""
chaos_at_exit() { [[ -n "$MOUNTED" ]] && umount "$MOUNTED"; }
chaos_workdir db GEN_PID

failures=0

# start_load DIR: the generator for the whole phase, in the background.
start_load() {
  local dir="$1"
  "$BIN/pcrf-bench" run --scenario "$CHAOS_ROOT/bench/scenarios/seed.toml" \
    --target "127.0.0.1:$DIAMETER_PORT" --peers 4 --subscribers "$SUBSCRIBERS" \
    --rate "$RATE" --duration "$((BEFORE + OUTAGE + AFTER))s" --warmup 1s \
    --retransmit 5 --retransmit-wait 5s \
    --answer-log "$dir/answers.jsonl" --out "$dir/report.json" \
    --json >"$dir/gen.json" 2>"$dir/gen.err" &
  GEN_PID=$!
}

# summarize NAME DIR T_DOWN_MS T_UP_MS: answers during the outage, recovery.
summarize() {
  python3 - "$@" <<'EOF'
import json, sys, collections
name, d, t_down, t_up = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
during, after = collections.Counter(), collections.Counter()
first_ok_after = None
last_err_after = None
for line in open(d + "/answers.jsonl"):
    r = json.loads(line)
    key = str(r.get("result")) if r["outcome"] == "answered" else r["outcome"]
    t = r["at_ms"]
    if t_down <= t < t_up:
        during[key] += 1
    elif t >= t_up:
        after[key] += 1
        if key == "2001" and r["command"] in ("CCR-I", "CCR-U") and first_ok_after is None:
            first_ok_after = t
        if key != "2001":
            last_err_after = t if last_err_after is None else max(last_err_after, t)
print(f"{name}: outage {(t_up - t_down) / 1000:.1f} s; answers during it: " +
      ", ".join(f"{k}: {v}" for k, v in sorted(during.items())))
print(f"{name}: after the store came back: " + ", ".join(f"{k}: {v}" for k, v in sorted(after.items())))
rec = "none" if first_ok_after is None else f"{(first_ok_after - t_up) / 1000:.2f} s"
tail = "none" if last_err_after is None else f"{(last_err_after - t_up) / 1000:.2f} s"
print(f"{name}: recovery: first success {rec} after the store came back; last error answer {tail} after it")
EOF
}

# server_report NAME DIR: crash check and the error lines of the log.
server_report() {
  local name="$1" dir="$2"
  if [[ -n "$PCRF_PID" ]] && kill -0 "$PCRF_PID" 2>/dev/null; then
    echo "$name: pcrf serve still running (no crash)"
  else
    echo "$name: pcrf serve DIED"
    failures=$((failures + 1))
  fi
  local n
  n=$(grep -c 'state change not committed' "$dir/pcrf.err" || true)
  echo "$name: log: $n lines 'state change not committed; answering DIAMETER_UNABLE_TO_COMPLY'; first error lines:"
  { grep -E 'ERROR|error' "$dir/pcrf.err" || true; } | sed -n '1,3p' | cut -c1-300 | sed 's/^/    /'
}

run_verify() {
  local name="$1" dir="$2" rc=0
  "$BIN/pcrf-bench" verify --answer-log "$dir/answers.jsonl" --api "$API_URL" \
    --out "$dir/verdict.json" >"$dir/verify.txt" 2>&1 || rc=$?
  sed "s/^/$name: /" "$dir/verify.txt"
  ((rc == 0)) || failures=$((failures + 1))
}

phase_postgres() {
  local dir="$work/postgres"
  mkdir -p "$dir"
  start_postgres
  DIAMETER_PORT="" API_PORT=""
  chaos_config "$dir" postgres
  chaos_start "$dir" || die "pcrf serve (postgres) did not start"
  provision_population "$SUBSCRIBERS"
  log "postgres: load $RATE/s; PostgreSQL stopped after ${BEFORE}s for ${OUTAGE}s"
  start_load "$dir"
  sleep "$BEFORE"
  local t_down t_up
  t_down=$(now_ms)
  pg_down fast
  sleep "$OUTAGE"
  pg_up || die "PostgreSQL did not come back: $(tail -5 "$PG_TMP/server.log")"
  t_up=$(now_ms)
  log "postgres: PostgreSQL is back; load continues ${AFTER}s"
  wait "$GEN_PID" || log "pcrf-bench run exited non-zero: $(tail -2 "$dir/gen.err")"
  GEN_PID=""
  summarize postgres "$dir" "$t_down" "$t_up"
  server_report postgres "$dir"
  run_verify postgres "$dir"
  chaos_stop
  stop_postgres
}

phase_sqlite() {
  [[ "$(id -u)" -eq 0 ]] || die "the disk-full phase mounts a tmpfs: run as root (or STORE=postgres)"
  local dir="$work/sqlite" vol="$work/sqlite/vol"
  mkdir -p "$vol"
  mount -t tmpfs -o "size=${TMPFS_MB}m" pcrf-chaos "$vol"
  MOUNTED="$vol"
  DATA_DIR="$vol/data" DIAMETER_PORT="" API_PORT=""
  chaos_config "$dir" sqlite
  chaos_start "$dir" || die "pcrf serve (sqlite) did not start"
  provision_population "$SUBSCRIBERS"
  log "sqlite: load $RATE/s; the ${TMPFS_MB} MiB volume filled after ${BEFORE}s for ${OUTAGE}s"
  start_load "$dir"
  sleep "$BEFORE"
  local t_down t_up
  t_down=$(now_ms)
  dd if=/dev/zero of="$vol/filler" bs=1M status=none 2>/dev/null || true
  echo "sqlite: volume full: $(df -h "$vol" | tail -1 | awk '{print $3 " used, " $4 " free"}')"
  # Whatever the database frees meanwhile is taken too.
  local end=$((SECONDS + OUTAGE))
  while ((SECONDS < end)); do
    dd if=/dev/zero of="$vol/filler2" bs=4k oflag=append conv=notrunc status=none 2>/dev/null || true
    sleep 1
  done
  rm -f "$vol/filler" "$vol/filler2"
  t_up=$(now_ms)
  log "sqlite: space is back; load continues ${AFTER}s"
  wait "$GEN_PID" || log "pcrf-bench run exited non-zero: $(tail -2 "$dir/gen.err")"
  GEN_PID=""
  summarize sqlite "$dir" "$t_down" "$t_up"
  server_report sqlite "$dir"
  # No corruption: kill -9, check the file, restart on it, verify.
  chaos_kill9
  local check
  check=$(python3 -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(c.execute("PRAGMA integrity_check").fetchone()[0])' "$vol/data/pcrf.db" 2>&1 || true)
  echo "sqlite: after kill -9: PRAGMA integrity_check: $check"
  [[ "$check" == ok ]] || failures=$((failures + 1))
  chaos_start "$dir" || die "pcrf serve did not restart on the database after the disk-full phase"
  { grep -E 'corrupt' "$dir/pcrf.err" || true; } | tail -2 | cut -c1-300 | sed 's/^/    /'
  run_verify sqlite "$dir"
  chaos_stop
  umount "$vol"
  MOUNTED=""
}

started=$SECONDS
[[ $STORE == all || $STORE == postgres ]] && phase_postgres
[[ $STORE == all || $STORE == sqlite ]] && phase_sqlite
echo "db-outage: $failures failures, wall $((SECONDS - started)) s"
((failures == 0))
