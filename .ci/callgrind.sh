#!/usr/bin/env bash
# Instructions per round trip, counted by callgrind: a figure that does not move with the machine's load,
# for before/after comparisons of the request/reply hot path (Docs/Benchmarks.md). Not part of `run`.
#
# `blip bench --workload in-memory` makes sequential 100-byte echo round trips between two connections in
# one process (both sides, API to API, the in-memory transport). It runs at two counts; the difference,
# divided by the difference in count, leaves out start-up and the 100 warm-up round trips.
# BLIP_CALLGRIND_ARGS adds options to the bench command (--tracing, say).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v valgrind > /dev/null; then
    apt-get install -y -q valgrind > /dev/null
fi
swift build -c release --scratch-path .build-bench --product blip
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# valgrind 3.19 cannot read the DWARF 5 debug information this toolchain writes; the symbols stay.
cp .build-bench/release/blip "$work/blip"
strip --strip-debug "$work/blip"
instructions() {
    # BLIP_MAIN_THREAD_WAITS: valgrind stops inside the signal thread that dispatchMain() makes.
    # shellcheck disable=SC2086
    BLIP_MAIN_THREAD_WAITS=1 valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.$1" \
        "$work/blip" bench --workload in-memory --count "$1" ${BLIP_CALLGRIND_ARGS:-} 2>&1 \
        | sed -n 's/.*refs: *//p' | tr -d ,
}
low=$(instructions 200)
high=$(instructions 1200)
echo "callgrind: $(((high - low) / 1000)) instructions per round trip (${low} at 200, ${high} at 1200)"
if [ -n "${BLIP_CALLGRIND_KEEP:-}" ]; then
    cp "$work/callgrind.200" "$work/callgrind.1200" "$BLIP_CALLGRIND_KEEP"
fi
