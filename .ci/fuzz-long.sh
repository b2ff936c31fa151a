#!/usr/bin/env bash
# Long local fuzzing runs (not part of CI): every target for an hour by default, at low priority so the
# machine stays usable, then a summary per target and the size of each working corpus after minimising.
#   bash .ci/fuzz-long.sh                      # an hour per target, the three in parallel
#   BLIP_FUZZ_SECONDS=600 bash .ci/fuzz-long.sh
# The working corpus (reports/fuzz/<target>/corpus) carries over between runs. A crash lands in
# reports/fuzz/<target>/artifacts: copy it into Fixtures/fuzz/regressions/<target>/ (the replay test and
# every later run pick it up) and fix the bug. Figures from these runs are in Docs/Testing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export BLIP_FUZZ_SECONDS="${BLIP_FUZZ_SECONDS:-3600}"
export BLIP_FUZZ_SEED="${BLIP_FUZZ_SEED:-0}"  # a new random seed each run: explore, not repeat
work="${BLIP_FUZZ_WORK:-$PWD/reports/fuzz}"
export BLIP_FUZZ_WORK="$work"
started=$SECONDS

status=0
nice -n 10 bash .ci/fuzz.sh | tee "$work-summary.txt" || status=$?

# Minimise each working corpus (libFuzzer's merge keeps the inputs that add coverage) and report its size.
fuzzer="$PWD/.build-fuzz/debug/BLIPFuzz"
for target in ${BLIP_FUZZ_TARGETS:-frames engine properties}; do
    before=$(find "$work/$target/corpus" -type f | wc -l)
    rm -rf "$work/$target/minimised" && mkdir -p "$work/$target/minimised"
    BLIP_FUZZ_TARGET="$target" SWIFT_BACKTRACE=enable=no nice -n 10 "$fuzzer" -merge=1 \
        -rss_limit_mb=4096 -timeout=30 "$work/$target/minimised" "$work/$target/corpus" \
        >"$work/$target/merge.txt" 2>&1 || true
    after=$(find "$work/$target/minimised" -type f | wc -l)
    echo "fuzz $target: working corpus $before inputs, $after after minimising" | tee -a "$work-summary.txt"
done
echo "fuzz-long: done in $((SECONDS - started)) s (summary: $work-summary.txt)"
exit "$status"
