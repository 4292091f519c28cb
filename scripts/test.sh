#!/usr/bin/env bash
# The test command: runs the whole test suite on a fresh Debian 12 machine
# with Rust, and is what CI runs (.ci/run). In order:
#   1. installs the tools the interop tests use (scripts/install-test-deps.sh);
#   2. starts PostgreSQL on 127.0.0.1:5432 unless one is already answering,
#      creates the role and database pcrf_test (password pcrf_test) if
#      missing, and exports PCRF_TEST_DATABASE_URL for the PostgreSQL tests
#      (set it yourself to use another server; then nothing is created);
#   3. checks formatting (cargo fmt) and lints (cargo clippy, warnings denied);
#   4. runs every test: cargo nextest when installed (plus the doc tests,
#      which nextest does not run), cargo test otherwise.
# Exits non-zero when any step fails (set-up, fmt and clippy stop at once).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n==> %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    else
        sudo -n "$@"
    fi
}

step "test dependencies"
scripts/install-test-deps.sh

start_postgres() {
    if pg_isready -q -h 127.0.0.1 -p 5432; then
        echo "PostgreSQL already running on 127.0.0.1:5432" >&2
        return 0
    fi
    local ver
    ver=$(pg_lsclusters --no-header 2>/dev/null | awk '$2 == "main" { print $1; exit }')
    if [ -z "$ver" ]; then
        ver=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
        as_root pg_createcluster "$ver" main
    fi
    as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start
    for _ in $(seq 1 60); do
        if pg_isready -q -h 127.0.0.1 -p 5432; then
            echo "PostgreSQL $ver started on 127.0.0.1:5432" >&2
            return 0
        fi
        sleep 0.5
    done
    echo "PostgreSQL $ver did not start; see /var/log/postgresql/" >&2
    return 1
}

# The test role and database, created once (idempotent).
provision_test_database() {
    local psql
    if ! id postgres >/dev/null 2>&1; then
        echo "no local postgres user: not creating the test database" >&2
        return 0
    fi
    if [ "$(id -u)" -eq 0 ]; then
        psql=(runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -d postgres)
    else
        psql=(sudo -n -u postgres psql -X -q -v ON_ERROR_STOP=1 -d postgres)
    fi
    if [ "$("${psql[@]}" -tAc "SELECT 1 FROM pg_roles WHERE rolname = 'pcrf_test'")" != 1 ]; then
        "${psql[@]}" -c "CREATE ROLE pcrf_test LOGIN PASSWORD 'pcrf_test' CREATEDB"
    fi
    if [ "$("${psql[@]}" -tAc "SELECT 1 FROM pg_database WHERE datname = 'pcrf_test'")" != 1 ]; then
        "${psql[@]}" -c "CREATE DATABASE pcrf_test OWNER pcrf_test"
    fi
}

step "PostgreSQL"
start_postgres
if [ -z "${PCRF_TEST_DATABASE_URL:-}" ]; then
    provision_test_database
    export PCRF_TEST_DATABASE_URL="postgres://pcrf_test:pcrf_test@127.0.0.1:5432/pcrf_test"
fi
if ! psql "$PCRF_TEST_DATABASE_URL" -X -q -tAc 'SELECT 1' >/dev/null; then
    echo "cannot connect to PCRF_TEST_DATABASE_URL=$PCRF_TEST_DATABASE_URL" >&2
    exit 1
fi

# A minimal rustup profile lacks these two components.
if command -v rustup >/dev/null 2>&1; then
    cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
    cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

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
if [ "$status" -ne 0 ]; then
    step "tests FAILED"
    exit "$status"
fi
step "all tests passed"
