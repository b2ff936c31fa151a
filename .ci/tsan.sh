#!/usr/bin/env bash
# The whole test suite under ThreadSanitizer (its own scratch path: every dependency is rebuilt with it).
# The seeded engine sessions are cut to BLIP_SIMULATION_SESSIONS (default 400): the engine has no threads of
# its own, and its 10 000 sessions run in the normal test job.
set -euo pipefail
cd "$(dirname "$0")/.."
export BLIP_SIMULATION_SESSIONS="${BLIP_SIMULATION_SESSIONS:-400}"
swift build --build-tests --sanitize=thread --scratch-path .build-tsan
TSAN_OPTIONS="suppressions=$PWD/.ci/tsan.supp${TSAN_OPTIONS:+ $TSAN_OPTIONS}" \
    swift test --skip-build --sanitize=thread --scratch-path .build-tsan 2>&1 | tee .build-tsan/test-output.txt
grep -E "^(✔|✘) Test run with" .build-tsan/test-output.txt | tail -n 1 | sed 's/^/tsan: /'
