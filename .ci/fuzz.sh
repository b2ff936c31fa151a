#!/usr/bin/env bash
# Runs the fuzz targets (frames, engine, properties, connection) under libFuzzer with AddressSanitizer, in parallel,
# each for BLIP_FUZZ_SECONDS (default 60), starting from the seed corpus and the saved regressions.
# Long local runs: BLIP_FUZZ_SECONDS=3600 bash .ci/fuzz.sh (the working corpus in reports/fuzz/<target>
# grows across runs; promote useful finds into Fixtures/fuzz/corpus, crashes into Fixtures/fuzz/regressions).
# Prints one summary line per target; exits 1 if any target crashed, leaked or hung.
# BLIP_FUZZ_SEED (default 1) fixes libFuzzer's random seed, so that a CI run explores what the same
# command explored here, and a failure reproduces; 0 lets libFuzzer pick one (the long runs do).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${BLIP_FUZZ_SECONDS:-60}"
targets="${BLIP_FUZZ_TARGETS:-frames engine properties connection}"
work="${BLIP_FUZZ_WORK:-$PWD/reports/fuzz}"
seed="${BLIP_FUZZ_SEED:-1}"

# The recipe of shared/docs/verification.md: one combined -sanitize=fuzzer,address (it must come last),
# its own scratch path, and -DFUZZING so that the corpus-replaying main() steps aside for libFuzzer's.
swift build -c debug --product BLIPFuzz --scratch-path .build-fuzz --sanitize=fuzzer \
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING -Xswiftc -use-ld=lld
fuzzer="$PWD/.build-fuzz/debug/BLIPFuzz"

pids=()
for target in $targets; do
    mkdir -p "$work/$target/corpus" "$work/$target/artifacts"
    cp -n Fixtures/fuzz/corpus/"$target"/* "$work/$target/corpus/" 2>/dev/null || true
    regressions="Fixtures/fuzz/regressions/$target"
    mkdir -p "$regressions"
    # SWIFT_BACKTRACE=enable=no: the Swift backtracer and ASan deadlock on a crash (verification.md).
    BLIP_FUZZ_TARGET="$target" SWIFT_BACKTRACE=enable=no timeout $((seconds + 300)) "$fuzzer" \
        -max_total_time="$seconds" -seed="$seed" -rss_limit_mb=4096 -timeout=30 -print_final_stats=1 \
        -dict=Fixtures/fuzz/blip.dict -artifact_prefix="$work/$target/artifacts/" \
        "$work/$target/corpus" "$regressions" >"$work/$target/log.txt" 2>&1 &
    pids+=($!)
done

status=0
index=0
for target in $targets; do
    code=0
    wait "${pids[$index]}" || code=$?
    index=$((index + 1))
    log="$work/$target/log.txt"
    runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo "?")
    cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -n 1 | grep -Eo '[0-9]+' || echo "?")
    features=$(grep -Eo 'ft: [0-9]+' "$log" | tail -n 1 | grep -Eo '[0-9]+' || echo "?")
    crashes=$(find "$work/$target/artifacts" -type f | wc -l)
    echo "fuzz $target: $runs runs in ${seconds} s, coverage $cov edges, $features features, $crashes crashes (exit $code)"
    if [ "$code" -ne 0 ] || [ "$crashes" -ne 0 ]; then
        status=1
        grep -E 'Fatal error|ERROR: AddressSanitizer|ERROR: LeakSanitizer|SUMMARY|Test unit written' "$log" | head -n 8 >&2
    fi
done
exit "$status"
