#!/usr/bin/env bash
# Installs the system packages the test suite needs, on Debian 12:
#   tshark                       - independent Diameter decoder (tests/tshark.rs)
#   freediameterd, -extensions   - independent Diameter peer (tests/freediameter.rs)
#   erlang-base, -diameter, -dev - OTP's strict Diameter stack (tests/erlang_gx.rs)
#   postgresql                   - the production store's database
#   prometheus                   - for promtool (tests/suite/deploy_files.rs checks the
#                                  alert rules); installed with service starts
#                                  denied, so no Prometheus server is left running
#   patroni                      - `patroni --validate-config` (tests/suite/patroni_files.rs
#                                  checks deploy/cluster/patroni/); installed like
#                                  prometheus, its service left stopped and disabled
#   curl, python3                - the README tour's commands (tests/suite/readme_tour.rs)
#   systemd, iproute2, curl,     - the Debian package's test (deploy/debian/test-package.sh):
#   dpkg-dev                       systemd-analyze and systemd-sysusers, a private network
#                                  namespace's loopback, the API checks, dpkg-shlibdeps
#                                  for the package's dependencies
# and cargo-deb (cargo install), which builds the Debian package.
#   rabbitmq-server              - the AMQP broker of the notification tests
#   chromium, chromium-driver    - headless browser for the console test (tests/suite/console_browser.rs)
#   nghttp2-client               - nghttp and h2load: a second HTTP/2 client beside the
#                                  Python one for the SBI listener (tests/suite/sbi_*.rs)
# and, with pip for the python3 the tests run, the independent HTTP/2 peer of
# the SBI tests: h2 (frames sent by hand: the hostile suite), httpx[http2]
# (an SMF's client) and hypercorn (an HTTP/2 server: the NRF emulator).
# Idempotent: when everything is installed it only runs dpkg-query and exits.
# Runs as root, or through sudo when not root.
set -euo pipefail

PACKAGES=(
    tshark
    freediameterd
    freediameter-extensions
    erlang-base
    erlang-diameter
    erlang-dev
    postgresql
    prometheus
    patroni
    curl
    python3
    systemd
    iproute2
    dpkg-dev
    rabbitmq-server
    chromium
    chromium-driver
    nghttp2-client
)

# The Python HTTP/2 peer (pip, for the python3 on PATH, which may not be
# Debian's); only an import check when already there.
if ! python3 -c 'import h2, httpx, hypercorn' >/dev/null 2>&1; then
    echo "install-test-deps: installing h2, httpx[http2], hypercorn (pip)" >&2
    python3 -m pip install -q 'h2>=4.1' 'httpx[http2]>=0.23' 'hypercorn>=0.14'
fi

# cargo-deb (not a Debian package): built from crates.io for the user that
# runs the tests, whatever happens to the system packages below.
if ! command -v cargo-deb >/dev/null 2>&1; then
    echo "install-test-deps: installing cargo-deb" >&2
    cargo install cargo-deb --locked
fi

installed() {
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = "installed" ]
}

missing=()
for p in "${PACKAGES[@]}"; do
    installed "$p" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
echo "install-test-deps: installing ${missing[*]}" >&2

if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo -n)
else
    echo "install-test-deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive

# tshark's package asks whether non-root users may capture; answer it up front.
echo "wireshark-common wireshark-common/install-setuid boolean false" |
    "${as_root[@]}" debconf-set-selections

# Refresh the package lists only when they are absent or cannot find a package.
need_update=0
if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
    need_update=1
else
    for p in "${missing[@]}"; do
        if ! apt-cache show "$p" >/dev/null 2>&1; then
            need_update=1
            break
        fi
    done
fi
if [ "$need_update" -eq 1 ]; then
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
fi

# Debian's prometheus package ships promtool beside a server that its
# postinst would start (and enable) on :9090, and patroni's enables its
# service. The tests need only the tools: while they install, a
# policy-rc.d (Debian's hook for exactly this) denies every service start;
# one already in place (containers) is left as it is.
others=()
quiet=()
for p in "${missing[@]}"; do
    case "$p" in
    prometheus | patroni) quiet+=("$p") ;;
    *) others+=("$p") ;;
    esac
done
if [ ${#others[@]} -gt 0 ]; then
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends "${others[@]}"
fi
if [ ${#quiet[@]} -gt 0 ]; then
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\n# Added by install-test-deps.sh while prometheus installs.\nexit 101\n' |
            "${as_root[@]}" tee "$policy" >/dev/null
        "${as_root[@]}" chmod 755 "$policy"
        # Removed however the script ends (a failed install, Ctrl-C).
        trap '"${as_root[@]}" rm -f "$policy"' EXIT
    fi
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends "${quiet[@]}"
    # Where a permissive policy-rc.d let one start, or systemd would start
    # it at the next boot (the packages enable them), stop and disable it.
    if [ -d /run/systemd/system ]; then
        for p in "${quiet[@]}"; do
            "${as_root[@]}" systemctl disable --now "$p.service" >/dev/null 2>&1 || true
        done
    fi
fi
