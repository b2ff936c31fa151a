#!/usr/bin/env bash
# The library as an ordinary user sees it: run after .ci/test.sh (whose debug build it uses), as root, it
# creates an unprivileged user and runs, as that user, `blip demo`, a smoke of the tool (serve, request,
# bench against it and --self, a proxy in front of it) and the loopback suites of the BLIP, WebSocket,
# Hummingbird and tool test targets. Until a release had it, every connection failed for such a user (a TCP
# option set at the socket level, where its number means SO_DEBUG); as root nothing showed it.
# Tests that need root skip here with a printed reason; the root pass runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
user=${BLIP_UNPRIVILEGED_USER:-blipci}

if [ "$(id -u)" -ne 0 ]; then
    echo "unprivileged: already running as $(id -un) (not root): the test job itself was the unprivileged pass"
    exit 0
fi
id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"

# The user must reach the checkout (read-only is enough: it writes only under its own temporary folder).
# Every folder above it gets the search permission it lacks, and loses it again at the end.
opened=()
# Every folder from the checkout up, and its mode now: the same at the end, or the pass fails.
walked=()
dir=$repo
while [ "$dir" != / ]; do walked+=("$dir"); dir=$(dirname "$dir"); done
modes_before=$(stat -c '%a %n' "${walked[@]}")
# On the way out, whatever happened: the folders' permissions as they were, and no process of the user's left.
restore() {
    local status=$?
    for dir in "${opened[@]}"; do chmod o-x "$dir"; done
    pkill -KILL -u "$user" 2>/dev/null || true
    if [ "$(stat -c '%a %n' "${walked[@]}")" != "$modes_before" ]; then
        echo "unprivileged: the folders above the checkout did not get their modes back:" >&2
        diff <(echo "$modes_before") <(stat -c '%a %n' "${walked[@]}") >&2 || true
        status=1
    fi
    exit "$status"
}
trap restore EXIT
dir=$repo
while [ "$dir" != / ]; do
    # Others may search it when the tenth character of its mode is x, or t for a sticky folder such as /tmp
    # (reading only x took /tmp for closed, and the restore then took its search bit away for good).
    case "$(stat -c %A "$dir" | cut -c10)" in
        x | t) ;;
        *)
            chmod o+x "$dir"
            opened+=("$dir")
            ;;
    esac
    dir=$(dirname "$dir")
done
if ! runuser -u "$user" -- test -r "$repo/Package.swift"; then
    echo "unprivileged: $user cannot read $repo" >&2
    exit 1
fi

bin=$(swift build --show-bin-path)
work=$(runuser -u "$user" -- mktemp -d)
as_user() {
    # Coverage data would go to the checkout, which the user cannot write: nowhere, here.
    runuser -u "$user" -- env HOME="$(getent passwd "$user" | cut -d: -f6)" LLVM_PROFILE_FILE=/dev/null \
        TMPDIR="$work" "$@"
}

echo "== as $user: blip demo"
as_user "$bin/blip" demo

echo "== as $user: blip serve, request, bench, proxy"
as_user "$bin/blip" serve --port 0 >"$work/serve.log" 2>&1 &
serve=$!
# runuser does not pass a signal on to its command: the user's processes are ended by user.
stop_serve() { pkill -TERM -u "$user" -f "blip serve" 2>/dev/null || true; wait "$serve" 2>/dev/null || true; }
url=
for _ in $(seq 1 200); do
    url=$(grep -o 'ws://127.0.0.1:[0-9]*/' "$work/serve.log" | head -n 1 || true)
    [ -n "$url" ] && break
    sleep 0.1
done
if [ -z "$url" ]; then
    cat "$work/serve.log" >&2
    stop_serve
    echo "unprivileged: blip serve did not start" >&2
    exit 1
fi
as_user "$bin/blip" request "$url" --profile echo --body "hello from $user"
as_user "$bin/blip" bench "$url" --workload rt --count 2000
as_user "$bin/blip" bench --self --workload rt --count 2000
as_user "$bin/blip" proxy --listen 127.0.0.1:0 --upstream "${url%/}" >"$work/proxy.log" 2>&1 &
proxy=$!
proxy_url=
for _ in $(seq 1 200); do
    proxy_url=$(grep -o 'listening on ws://127.0.0.1:[0-9]*' "$work/proxy.log" | head -n 1 | cut -d' ' -f3 || true)
    [ -n "$proxy_url" ] && break
    sleep 0.1
done
status=0
if [ -z "$proxy_url" ]; then
    cat "$work/proxy.log" >&2
    echo "unprivileged: blip proxy did not start" >&2
    status=1
else
    as_user "$bin/blip" request "$proxy_url/" --profile echo --body "through the proxy" || status=$?
fi
pkill -TERM -u "$user" -f "blip proxy" 2>/dev/null || true
wait "$proxy" 2>/dev/null || true
stop_serve
[ "$status" -eq 0 ] || exit "$status"

# (Not the timing suites of .ci/timing-suites: .ci/test.sh runs them one at a time, on a quiet machine.)
echo "== as $user: the loopback suites of BLIPTests, BLIPWebSocketTests, BLIPHummingbirdTests, BLIPToolTests"
tests=$(find "$bin" -maxdepth 1 -name '*PackageTests.xctest' | head -n 1)
status=0
# The suites open hundreds of sockets at a time: lift the soft descriptor limit to the user's hard one.
# The stepped connection pairs need no privilege either way: 500 of them here, 10 000 in the root pass.
as_user bash -c 'ulimit -n "$(ulimit -Hn)" 2>/dev/null || true; export BLIP_PAIR_SESSIONS=500
    cd "$1" && exec "$2" --testing-library swift-testing \
    --filter "^(BLIPTests|BLIPWebSocketTests|BLIPHummingbirdTests|BLIPToolTests)\." --skip "$3"' \
    _ "$repo" "$tests" "$(cat "$repo/.ci/timing-suites")" \
    >"$work/tests.txt" 2>&1 || status=$?
# The colours Swift Testing prints to a terminal are off here; its lines are read as the main job's are.
sed 's/\x1b\[[0-9;]*m//g' "$work/tests.txt" >"$repo/.build/unprivileged-test-output.txt"
if [ "$status" -ne 0 ]; then
    echo "== failures (as $user)"
    grep -a -E "^✘ .*(recorded an issue|failed)" "$repo/.build/unprivileged-test-output.txt" | grep -v "Test run with" \
        | cut -c1-600 | head -n 60 || true
fi
grep -a -E "^(✔|✘) Test run with" "$repo/.build/unprivileged-test-output.txt" | tail -n 1 | sed "s/^/as $user: /"
rm -rf "$work"
exit "$status"
