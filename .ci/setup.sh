#!/usr/bin/env bash
# Installs what a fresh machine lacks, as Debian packages.
#
#   bash .ci/setup.sh           what building swift-blip and running `blip demo` need: the system zlib
#                               headers and pkg-config (CBLIPZlib links the system zlib)
#   bash .ci/setup.sh --tests   also what the tests need: python3 (the reference decoder, flooding and timing
#                               peers), tinyproxy and microsocks (the real HTTP and SOCKS5 proxies), iproute2 and
#                               nftables (faulty links between network namespaces), haproxy (the rolling
#                               restart) and headless Chromium with its WebDriver (the browser client's tests;
#                               where they cannot be installed, those tests are skipped and say why)
set -euo pipefail

tests=false
case "${1:-}" in
    "") ;;
    --tests) tests=true ;;
    *) echo "usage: bash .ci/setup.sh [--tests]" >&2; exit 64 ;;
esac

sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
install() {
    echo "setup: installing $*"
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "$@"
}

missing=()
dpkg -s zlib1g-dev >/dev/null 2>&1 || missing+=(zlib1g-dev)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
if $tests; then
    command -v python3 >/dev/null 2>&1 || missing+=(python3)
    [ -x /usr/bin/tinyproxy ] || missing+=(tinyproxy)
    [ -x /usr/bin/microsocks ] || missing+=(microsocks)
    [ -x /usr/sbin/ip ] || missing+=(iproute2)
    [ -x /usr/sbin/nft ] || missing+=(nftables)
    [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
fi
[ ${#missing[@]} -eq 0 ] || install "${missing[@]}"
if $tests && ! { [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; }; then
    if ! install chromium chromium-driver >/dev/null; then
        echo "setup: chromium could not be installed; the browser tests will be skipped with that reason" >&2
    fi
fi
pkg-config --exists zlib || { echo "setup: pkg-config cannot find zlib" >&2; exit 1; }
command -v swift >/dev/null 2>&1 || { echo "setup: swift is not on PATH" >&2; exit 1; }
