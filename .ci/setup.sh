#!/usr/bin/env bash
# Installs what a fresh machine lacks to build and test swift-blip: the system zlib headers and
# pkg-config (CBLIPZlib links the system zlib), python3 (the reference decoder used by the tests) and
# tinyproxy and microsocks (the real HTTP and SOCKS5 proxies the proxy tests go through), iproute2 and nftables
# (the faulty links between network namespaces). Headless
# Chromium and its WebDriver (chromium, chromium-driver) run the browser client's tests; where they cannot
# be installed those tests are skipped, and say why in the test output.
set -euo pipefail

missing=()
dpkg -s zlib1g-dev >/dev/null 2>&1 || missing+=(zlib1g-dev)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
[ -x /usr/bin/tinyproxy ] || missing+=(tinyproxy)
[ -x /usr/bin/microsocks ] || missing+=(microsocks)
# Network namespaces joined by veth pairs, with nftables rules, for the faulty-link tests (run as root).
[ -x /usr/sbin/ip ] || missing+=(iproute2)
[ -x /usr/sbin/nft ] || missing+=(nftables)
# HAProxy in front of several blip serve processes, for the rolling-restart test.
[ -x /usr/sbin/haproxy ] || missing+=(haproxy)
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    sudo_cmd=()
    [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}"
fi
if ! { [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; }; then
    echo "setup: installing chromium chromium-driver (the browser client's tests)"
    sudo_cmd=()
    [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
    if ! { "${sudo_cmd[@]}" apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq chromium chromium-driver >/dev/null; }; then
        echo "setup: chromium could not be installed; the browser tests will be skipped with that reason" >&2
    fi
fi
pkg-config --exists zlib || { echo "setup: pkg-config cannot find zlib" >&2; exit 1; }
command -v swift >/dev/null 2>&1 || { echo "setup: swift is not on PATH" >&2; exit 1; }
