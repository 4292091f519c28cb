#!/usr/bin/env bash
# The test command: runs the whole test suite on a fresh Debian 12 machine
# with Rust, and is what CI runs (.ci/run). In order:
#   1. installs the tools the interop tests use (scripts/install-test-deps.sh);
#   2. starts PostgreSQL on 127.0.0.1:5432 unless one is already answering;
#   3. checks formatting (cargo fmt) and lints (cargo clippy, warnings denied);
#   4. runs every test: cargo nextest when installed (plus the doc tests,
#      which nextest does not run), cargo test otherwise.
# Exits non-zero on the first failing step.
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
step "PostgreSQL"
start_postgres

# A minimal rustup profile lacks these two components.
if command -v rustup >/dev/null 2>&1; then
    cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
    cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

if cargo nextest --version >/dev/null 2>&1; then
    step "cargo nextest run"
    cargo nextest run --workspace --no-fail-fast
    step "doc tests"
    cargo test --workspace --doc
else
    step "cargo test"
    cargo test --workspace --no-fail-fast
fi
step "all tests passed"
