#!/usr/bin/env bash
# Instructions per round trip, counted by callgrind: a figure that does not move with the machine's load,
# for before/after comparisons of the request/reply hot path (Docs/Benchmarks.md). Not part of `run`.
#
# Two figures, each from runs at two counts whose difference, divided by the difference in count, leaves
# out start-up and warm-up:
# - in-memory: `blip bench --workload in-memory`, sequential 100-byte echo round trips between two
#   connections in one process (both sides, API to API, the in-memory transport); then its pipelined shape
#   (64 in flight, per message) and its bulk shape (one random message up, per MiB, 16 against 80 MiB);
# - loopback: `blip bench --workload rt` against `blip serve`, each process under callgrind (user-space
#   instructions only: the system calls' kernel time is not counted), the client's and the server's; then
#   the same for raw WebSocket echoes (`--raw-only`, the baseline's task shape), and the ratio of the two.
# BLIP_CALLGRIND_ARGS adds options to the in-memory bench command (--tracing, say).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v valgrind > /dev/null; then
    apt-get install -y -q valgrind > /dev/null
fi
swift build -c release --scratch-path .build-bench --product blip
work=$(mktemp -d)
server_pid=""
trap 'if [ -n "$server_pid" ]; then kill "$server_pid" 2> /dev/null || true; fi; rm -rf "$work"' EXIT
# valgrind 3.19 cannot read the DWARF 5 debug information this toolchain writes; the symbols stay.
cp .build-bench/release/blip "$work/blip"
strip --strip-debug "$work/blip"
run() {
    # BLIP_MAIN_THREAD_WAITS: valgrind stops inside the signal thread that dispatchMain() makes.
    BLIP_MAIN_THREAD_WAITS=1 valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.$1" "$work/blip" "${@:2}"
}
refs() { sed -n 's/.*refs: *//p' "$1" | tr -d ,; }
# inMemory NAME ARGS...: the instructions of one in-memory bench run.
inMemory() {
    # shellcheck disable=SC2086
    run "in-memory.$1" bench --workload in-memory "${@:2}" ${BLIP_CALLGRIND_ARGS:-} 2> "$work/in-memory.$1.err" > /dev/null
    refs "$work/in-memory.$1.err"
}
low=$(inMemory rt.200 --count 200)
high=$(inMemory rt.1200 --count 1200)
echo "callgrind, in-memory: $(((high - low) / 1000)) instructions per round trip (${low} at 200, ${high} at 1200)"
# The tool runs Swift concurrency on NIO's event loops (BLIPTool.swift), which saves thread switches where a
# socket's loop resumes the caller; in memory the pair runs on Dispatch queues and the caller's resumption
# crosses to a loop. The same count with Swift's own global executor, which an in-process application has:
low=$(BLIP_CONCURRENCY_ON_EVENT_LOOPS=0 inMemory rt.default.200 --count 200)
high=$(BLIP_CONCURRENCY_ON_EVENT_LOOPS=0 inMemory rt.default.1200 --count 1200)
echo "callgrind, in-memory, Swift's default executor: $(((high - low) / 1000)) instructions per round trip"
low=$(inMemory pipelined.1000 --shape pipelined --count 1000)
high=$(inMemory pipelined.6000 --shape pipelined --count 6000)
echo "callgrind, in-memory pipelined-64: $(((high - low) / 5000)) instructions per message"
low=$(inMemory bulk.16 --shape bulk --size $((16 << 20)))
high=$(inMemory bulk.80 --shape bulk --size $((80 << 20)))
echo "callgrind, in-memory bulk (random data, up): $(((high - low) / 64)) instructions per MiB"

# loopback NAME COUNT [ARGS...]: sets client_NAME and server_NAME, each process's instructions for COUNT
# loopback round trips.
loopback() {
    # Started here rather than through `run`, so that $! is valgrind itself and SIGTERM reaches the server.
    BLIP_MAIN_THREAD_WAITS=1 valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.server.$1" \
        "$work/blip" serve --port 0 > "$work/server.$1.out" 2> "$work/server.$1.err" &
    server_pid=$!
    local port=""
    for _ in $(seq 1 600); do
        port=$(grep -o ':[0-9][0-9]*/' "$work/server.$1.out" 2> /dev/null | head -n 1 | tr -d ':/' || true)
        [ -n "$port" ] && break
        sleep 0.2
    done
    run "client.$1" bench "ws://127.0.0.1:$port/" --workload rt --count "$2" "${@:3}" > /dev/null \
        2> "$work/client.$1.err"
    kill -TERM "$server_pid"
    wait "$server_pid" || true
    server_pid=""
    eval "client_$1=$(refs "$work/client.$1.err") server_$1=$(refs "$work/server.$1.err")"
}
loopback 200 200
loopback 1200 1200
loopback raw200 200 --raw-only
loopback raw1200 1200 --raw-only
# shellcheck disable=SC2154
client_instructions=$(((client_1200 - client_200) / 1000))
# shellcheck disable=SC2154
server_instructions=$(((server_1200 - server_200) / 1000))
blip_instructions=$((client_instructions + server_instructions))
echo "callgrind, loopback WebSocket: ${blip_instructions} instructions per round trip" \
    "(client ${client_instructions}, server ${server_instructions})"
# shellcheck disable=SC2154
raw_client=$(((client_raw1200 - client_raw200) / 1000))
# shellcheck disable=SC2154
raw_server=$(((server_raw1200 - server_raw200) / 1000))
raw_instructions=$((raw_client + raw_server))
echo "callgrind, loopback raw WebSocket echo: ${raw_instructions} instructions per round trip" \
    "(client ${raw_client}, server ${raw_server}); BLIP takes" \
    "$(awk -v b="$blip_instructions" -v r="$raw_instructions" 'BEGIN { printf "%.2f", b / r }')x"
if [ -n "${BLIP_CALLGRIND_KEEP:-}" ]; then
    cp "$work"/callgrind.* "$BLIP_CALLGRIND_KEEP"
fi
