#!/usr/bin/env bash
# The test suite under ThreadSanitizer (its own scratch path: every dependency is rebuilt with it).
# ThreadSanitizer makes code 5-15 times slower. Run all at once on two cores, the suites ran past their time
# limits (a test's limit counts while every other test competes with it), so here at most BLIP_TSAN_WIDTH
# tests (default 4) run at a time, and the tests that only move volume (tens of MiB, ten thousand requests,
# a benchmark, the browser's 64 MiB each way, 64 MiB through proxies) are left to the normal test job: what
# they exercise for races, the small tests exercise too. The seeded engine sessions are cut to
# BLIP_SIMULATION_SESSIONS (default 400): the engine has no threads of its own, and its 10 000 sessions run
# in the normal test job.
set -euo pipefail
cd "$(dirname "$0")/.."
export BLIP_SIMULATION_SESSIONS="${BLIP_SIMULATION_SESSIONS:-400}"
# The seeded sessions of connection pairs likewise: 50 and 25 of them here, 200 and 100 in the normal test job.
export BLIP_SERIAL_SESSIONS="${BLIP_SERIAL_SESSIONS:-50}"
export BLIP_ENDING_SESSIONS="${BLIP_ENDING_SESSIONS:-25}"
# The stepped connection pairs run on one thread (no races to find in them): 100 here, 10 000 in the normal job.
export BLIP_PAIR_SESSIONS="${BLIP_PAIR_SESSIONS:-100}"
# Tests that check what is skipped outside ThreadSanitizer (ThreadSanitizerPresence) know they run under it.
export BLIP_UNDER_THREAD_SANITIZER=1
export SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH="${BLIP_TSAN_WIDTH:-4}"
volume='StreamedReplyOverSocketTests|StreamingOverSocketTests|BenchWorkloadTests|HandlerOrderTests/serialOrder'
volume+='|HostilePeerTests|FileDescriptorLimitTests|BrowserChecksTests|ProxyBulkTests'
# Child processes built with ThreadSanitizer: their memory (the server-wide budget's bound) and timing (the
# faulty links' keepalive bounds) measure the sanitizer, not the code; the races they could show, the
# in-process session and budget tests show.
volume+='|ServerBufferBudgetTests|FaultyLinkTests|RollingRestartTests|BodyFileStreamingTests'
# The suites that time what they test (.ci/timing-suites) would time the sanitizer; .ci/test.sh runs them.
volume+="|$(cat .ci/timing-suites)"
swift build --build-tests --sanitize=thread --scratch-path .build-tsan
status=0
TSAN_OPTIONS="suppressions=$PWD/.ci/tsan.supp${TSAN_OPTIONS:+ $TSAN_OPTIONS}" \
    swift test --skip-build --sanitize=thread --scratch-path .build-tsan --skip "${BLIP_TSAN_SKIP:-$volume}" 2>&1 \
    | tee .build-tsan/test-output.txt || status=$?
# A report is printed where it happened, among thousands of lines; repeat every one at the end, where a
# reader of the log (and CI's excerpt of its tail) looks first.
if grep -q "^WARNING: ThreadSanitizer" .build-tsan/test-output.txt; then
    echo "== ThreadSanitizer reports of this run, again:"
    sed -n '/^WARNING: ThreadSanitizer/,/^SUMMARY: ThreadSanitizer/p' .build-tsan/test-output.txt | head -n 600
fi
grep -E "^(✔|✘) Test run with" .build-tsan/test-output.txt | tail -n 1 | sed 's/^/tsan: /'
exit "$status"
