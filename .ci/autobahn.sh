#!/usr/bin/env bash
# Autobahn|Testsuite (cases 1-7, 9 and 10) against our WebSocket layer, both ways:
#   server: wstest -m fuzzingclient against `blip serve --echo-only`
#   client: wstest -m fuzzingserver against `blip autobahn-client` (our client handler, masking and all)
# The testsuite is Python 2.7 code: it runs in a virtualenv made from pyenv's 2.7.18 (see
# shared/docs/verification.md). Reports and configs go to reports/autobahn (ignored by git).
# Prints "autobahn server: N passed, N failed, N skipped" and the same for the client; exits non-zero
# if any case failed.
#
# Environment: BLIP_BIN=path/to/blip skips the build; AUTOBAHN_CASES='["1.*"]' runs fewer cases (the
# expected count then no longer applies: set AUTOBAHN_EXPECT too).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS

cases="${AUTOBAHN_CASES:-[\"1.*\", \"2.*\", \"3.*\", \"4.*\", \"5.*\", \"6.*\", \"7.*\", \"9.*\", \"10.*\"]}"
expect="${AUTOBAHN_EXPECT:-301}"  # cases 1-7, 9 and 10 of testsuite 25.10.1
out="$PWD/reports/autobahn"

# --- every background process ends with the script ---------------------------------------------------
pids=()
cleanup() {
    local pid
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- Python 2.7 virtualenv with the testsuite (as verification.md describes) -------------------------
pyenv_root="$(command -v pyenv >/dev/null 2>&1 && pyenv root || echo "${PYENV_ROOT:-$HOME/.pyenv}")"
py2="$pyenv_root/versions/2.7.18/bin/python2.7"
if [ ! -x "$py2" ]; then
    echo "autobahn: python 2.7.18 is missing from pyenv ($pyenv_root): Autobahn|Testsuite cannot run" >&2
    exit 1
fi
wstest=.venv-wstest/bin/wstest
if ! "$wstest" --autobahnversion >/dev/null 2>&1; then
    echo "== autobahn: installing the testsuite into .venv-wstest"
    rm -rf .venv-tool .venv-wstest
    python3 -m venv .venv-tool
    timeout 300 .venv-tool/bin/pip install -q --disable-pip-version-check "virtualenv==20.21.1"
    .venv-tool/bin/virtualenv -q --no-periodic-update -p "$py2" .venv-wstest
    timeout 600 .venv-wstest/bin/pip install -q --disable-pip-version-check --no-python-version-warning \
        -r .ci/autobahn-requirements-py27.txt
fi
"$wstest" --autobahnversion

# --- blip ---------------------------------------------------------------------------------------------
if [ -z "${BLIP_BIN:-}" ]; then
    echo "== autobahn: building blip"
    swift build --product blip -Xswiftc -warnings-as-errors
    BLIP_BIN="$(swift build --show-bin-path)/blip"
fi
test -x "$BLIP_BIN" || { echo "autobahn: no blip executable at $BLIP_BIN" >&2; exit 1; }

rm -rf "$out"
mkdir -p "$out"

# A free loopback port (the kernel picks it; it stays free until the test binds it, as a rule).
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# Waits (at most 30 s) until something accepts connections on 127.0.0.1:$1.
wait_for_port() {
    local attempt
    for attempt in $(seq 1 300); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "autobahn: nothing listens on 127.0.0.1:$1 after 30 s" >&2
    return 1
}

status=0

# --- server: fuzzingclient against blip serve --echo-only ---------------------------------------------
server_started=$SECONDS
port="$(free_port)"
timeout 600 "$BLIP_BIN" serve --echo-only --host 127.0.0.1 --port "$port" --max-message-size 33554432 \
    >"$out/server.log" 2>&1 &
pids+=($!)
wait_for_port "$port"
cat >"$out/fuzzingclient.json" <<EOF
{
  "outdir": "$out/servers",
  "servers": [{"agent": "swift-blip", "url": "ws://127.0.0.1:$port"}],
  "cases": $cases,
  "exclude-cases": ["12.*", "13.*"],
  "exclude-agent-cases": {}
}
EOF
echo "== autobahn: fuzzingclient against blip serve --echo-only on port $port"
(cd "$out" && timeout 300 "$OLDPWD/$wstest" -m fuzzingclient -s fuzzingclient.json >fuzzingclient.log 2>&1) || {
    echo "autobahn: wstest fuzzingclient exited with $? (log: $out/fuzzingclient.log)" >&2
    tail -n 20 "$out/fuzzingclient.log" >&2
}
kill "${pids[-1]}" 2>/dev/null || true
python3 .ci/autobahn_gate.py server "$out/servers/index.json" --expect "$expect" || status=1
echo "== autobahn: server side took $((SECONDS - server_started)) s"

# --- client: fuzzingserver against blip autobahn-client ----------------------------------------------
client_started=$SECONDS
port="$(free_port)"
cat >"$out/fuzzingserver.json" <<EOF
{
  "url": "ws://127.0.0.1:$port",
  "outdir": "$out/clients",
  "cases": $cases,
  "exclude-cases": ["12.*", "13.*"],
  "exclude-agent-cases": {}
}
EOF
echo "== autobahn: fuzzingserver on port $port against blip autobahn-client"
(cd "$out" && exec timeout 600 "$OLDPWD/$wstest" -m fuzzingserver -s fuzzingserver.json --webport 0 \
    >fuzzingserver.log 2>&1) &
pids+=($!)
wait_for_port "$port"
timeout 300 "$BLIP_BIN" autobahn-client --url "ws://127.0.0.1:$port" --agent swift-blip \
    >"$out/client.log" 2>&1 || {
    echo "autobahn: blip autobahn-client exited with $? (log: $out/client.log)" >&2
    tail -n 20 "$out/client.log" >&2
}
kill "${pids[-1]}" 2>/dev/null || true
python3 .ci/autobahn_gate.py client "$out/clients/index.json" --expect "$expect" || status=1
echo "== autobahn: client side took $((SECONDS - client_started)) s"

echo "== autobahn: done in $((SECONDS - started)) s (reports: reports/autobahn)"
exit "$status"
