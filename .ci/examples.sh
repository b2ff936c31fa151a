#!/usr/bin/env bash
# Builds the example packages under Examples/ (each depends on this one by path) and runs the sync server
# once: its REST route answers, its BLIP endpoint refuses a client without credentials with 401 and answers
# one with them (the debug blip of the tests), and SIGTERM stops it with status 0.
#
# The example builds in this package's own scratch path with the test build's flags, so that every module
# the test build compiled (NIO, Hummingbird, the library) is found up to date: 24 s instead of 526 s for a
# scratch path of its own, on a machine where the whole CI took 48 minutes. The test build is unaffected
# (18 s to find it up to date again afterwards).
set -euo pipefail
cd "$(dirname "$0")/.."
scratch="${BLIP_EXAMPLES_SCRATCH:-.build}"
flags=(--scratch-path "$scratch" --enable-code-coverage -Xswiftc -warnings-as-errors)
swift build --package-path Examples/SyncServer "${flags[@]}"
server_bin="$(swift build --package-path Examples/SyncServer "${flags[@]}" --show-bin-path)/SyncServer"
blip="${BLIP_BIN:-$(swift build --show-bin-path)/blip}"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$(mktemp)
"$server_bin" "$port" > "$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do grep -q "listening" "$log" && break; sleep 0.1; done
python3 - "$port" <<'PY'
import sys, urllib.request
body = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=10).read().decode()
assert "swift-blip example sync server" in body, body
print("REST:", body)
PY
if "$blip" request "ws://127.0.0.1:$port/db/_blipsync" --profile echo --body hi --timeout 10 2> /tmp/examples-refused.txt; then
    echo "a client without credentials was let in" >&2
    exit 1
fi
grep -q 401 /tmp/examples-refused.txt || { cat /tmp/examples-refused.txt >&2; exit 1; }
echo "BLIP without credentials: $(head -n 1 /tmp/examples-refused.txt)"
"$blip" request "ws://127.0.0.1:$port/db/_blipsync" --user alice:secret --profile setCheckpoint \
    --prop client=ci --body '{"seq":1}' --timeout 10
"$blip" request "ws://127.0.0.1:$port/db/_blipsync" --user alice:secret --profile getCheckpoint \
    --prop client=ci --timeout 10 | tee /tmp/examples-checkpoint.txt
grep -q "0-1" /tmp/examples-checkpoint.txt
kill -TERM "$pid"
wait "$pid"
trap - EXIT
echo "examples: ok"
