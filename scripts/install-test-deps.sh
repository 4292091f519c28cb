#!/usr/bin/env bash
# Installs the system packages the test suite needs, on Debian 12:
#   tshark                       - independent Diameter decoder (tests/tshark.rs)
#   freediameterd, -extensions   - independent Diameter peer (tests/freediameter.rs)
#   erlang-base, -diameter, -dev - OTP's strict Diameter stack (tests/erlang_gx.rs)
#   postgresql                   - the production store's database
#   chromium, chromium-driver    - headless browser for the console test (tests/console_browser.rs)
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
    chromium
    chromium-driver
)

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

"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends "${missing[@]}"
