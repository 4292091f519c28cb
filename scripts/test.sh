#!/usr/bin/env bash
# The test command: runs the whole test suite on a fresh Debian 12 machine
# with Rust, and is what CI runs (.ci/run). In order:
#   1. installs the tools the interop tests use (scripts/install-test-deps.sh);
#   2. uses PCRF_TEST_DATABASE_URL for the PostgreSQL tests if set;
#      otherwise starts a throwaway PostgreSQL cluster (initdb + pg_ctl in a
#      temporary directory, a free port on 127.0.0.1) and removes it on exit;
#   2b. starts RabbitMQ (the notification tests' broker, 127.0.0.1:5672,
#      guest/guest) when nothing listens there; a broker already running
#      is used as it is and never stopped;
#   3. checks formatting (cargo fmt), lints (cargo clippy, warnings denied)
#      and that no crate has an import cycle between its module files
#      (scripts/import-cycles.py: the layers point one way);
#   4. runs every test: cargo nextest when installed (plus the doc tests,
#      which nextest does not run), cargo test otherwise;
#   5. builds the Debian package (release build) and tests it installed
#      (deploy/debian/test-package.sh).
# Exits non-zero when any step fails (set-up, fmt, clippy and the import
# cycle check stop at once).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n==> %s\n' "$*" >&2; }

step "test dependencies"
scripts/install-test-deps.sh

# A throwaway PostgreSQL cluster for the tests: initdb in a temporary
# directory, a free port on 127.0.0.1, removed when the script exits.
# Runs as the postgres user when we are root (initdb refuses root).
PG_TMP=""
cleanup_postgres() {
    if [ -n "$PG_TMP" ] && [ -d "$PG_TMP" ]; then
        as_pg "$PG_BIN/pg_ctl" -D "$PG_TMP/data" -m immediate stop >/dev/null 2>&1 || true
        rm -rf "$PG_TMP"
    fi
}
as_pg() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}
start_throwaway_postgres() {
    PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    if [ -z "$PG_BIN" ] || [ ! -x "$PG_BIN/initdb" ]; then
        echo "PostgreSQL server binaries not found under /usr/lib/postgresql (scripts/install-test-deps.sh installs them)" >&2
        return 1
    fi
    PG_TMP=$(mktemp -d "${TMPDIR:-/tmp}/pcrf-test-pg.XXXXXX")
    trap cleanup_postgres EXIT
    if [ "$(id -u)" -eq 0 ]; then
        chown postgres "$PG_TMP"
    fi
    local port
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    as_pg "$PG_BIN/initdb" -D "$PG_TMP/data" -U pcrf_test --auth=trust -E UTF8 >"$PG_TMP/initdb.log" 2>&1 ||
        { cat "$PG_TMP/initdb.log" >&2; return 1; }
    as_pg "$PG_BIN/pg_ctl" -D "$PG_TMP/data" -l "$PG_TMP/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $PG_TMP -c fsync=on -c max_connections=200" start >/dev/null ||
        { cat "$PG_TMP/server.log" >&2; return 1; }
    as_pg "$PG_BIN/createdb" -h 127.0.0.1 -p "$port" -U pcrf_test pcrf_test
    export PCRF_TEST_DATABASE_URL="postgres://pcrf_test@127.0.0.1:$port/pcrf_test"
    echo "throwaway PostgreSQL ($PG_BIN) on 127.0.0.1:$port in $PG_TMP" >&2
}

step "PostgreSQL"
if [ -z "${PCRF_TEST_DATABASE_URL:-}" ]; then
    start_throwaway_postgres
fi
if ! psql "$PCRF_TEST_DATABASE_URL" -X -q -tAc 'SELECT 1' >/dev/null; then
    echo "cannot connect to PCRF_TEST_DATABASE_URL=$PCRF_TEST_DATABASE_URL" >&2
    exit 1
fi

# RabbitMQ for the notification tests: the machine's own broker when one
# listens on 127.0.0.1:5672 (left as it is), else one started here and left
# running for later runs.
amqp_listening() {
    (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null
}
step "RabbitMQ"
if ! amqp_listening; then
    if command -v rabbitmq-server >/dev/null 2>&1; then
        if [ "$(id -u)" -eq 0 ]; then
            rabbitmq-server -detached >/dev/null 2>&1 || true
        else
            sudo -n rabbitmq-server -detached >/dev/null 2>&1 || true
        fi
    fi
    for _ in $(seq 1 120); do
        amqp_listening && break
        sleep 1
    done
    if ! amqp_listening; then
        echo "RabbitMQ is not listening on 127.0.0.1:5672 (scripts/install-test-deps.sh installs rabbitmq-server)" >&2
        exit 1
    fi
fi
echo "RabbitMQ listening on 127.0.0.1:5672" >&2

# A minimal rustup profile lacks these two components.
if command -v rustup >/dev/null 2>&1; then
    cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
    cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

step "import cycles"
python3 scripts/import-cycles.py

# Doc tests run even when other tests failed, so one run reports everything.
status=0
if cargo nextest --version >/dev/null 2>&1; then
    step "cargo nextest run"
    cargo nextest run --workspace --no-fail-fast || status=$?
    step "doc tests"
    cargo test --workspace --doc || status=$?
else
    step "cargo test"
    cargo test --workspace --no-fail-fast || status=$?
fi
step "Debian package"
deploy/debian/test-package.sh || status=$?
if [ "$status" -ne 0 ]; then
    step "tests FAILED"
    exit "$status"
fi
step "all tests passed"
