#!/usr/bin/env bash
# The README's test command: set up a fresh machine, build with warnings as errors, run every test (with
# code coverage, so that .ci/coverage.sh can report it without a second build).
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/setup.sh --tests
swift build --build-tests --enable-code-coverage -Xswiftc -warnings-as-errors
# The suites run in parallel in one process, hundreds of sockets at a time: lift a soft limit of 1024
# (a common default) towards the hard one.
hard=$(ulimit -Hn)
if [ "$hard" = unlimited ] || [ "$hard" -gt 65536 ]; then hard=65536; fi
ulimit -n "$hard" 2>/dev/null || true
# The suites that time what they test (heartbeats, idle timeouts, a server restarted under a session,
# handshakes beside floods) run first, one test at a time: beside the rest of the suite (floods, Chromium,
# 64 MiB transfers), two cores delay any thread by seconds. No coverage from this pass (the next run's
# merge would replace it), so its profiles go nowhere.
timing=$(cat .ci/timing-suites)
# The whole output of each pass goes to a file; the console shows it without log lines (the servers, clients
# and proxies the tests start log every refusal and protocol error the tests provoke on purpose: a passing
# run printed 166 error, critical and warning lines) and without the summary line, printed once at the end.
console() {
    { grep -a -v -E '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}[+-][0-9]{4} (trace|debug|info|notice|warning|error|critical) ' \
        | grep -a -v -E "^(✔|✘) Test run with" || true; }
}
status=0
LLVM_PROFILE_FILE=/dev/null swift test --skip-build --no-parallel --filter "$timing" 2>&1 \
    | tee .build/test-output-timing.txt | console || status=$?
# Then everything else, in parallel, with code coverage.
swift test --skip-build --enable-code-coverage --skip "$timing" 2>&1 | tee .build/test-output.txt | console \
    || status=$?
echo "== the whole output, logs included: .build/test-output-timing.txt and .build/test-output.txt"
# Logs can bury a failure far above the end of the output: repeat every recorded issue here.
if [ "$status" -ne 0 ]; then
    echo "== failures"
    cat .build/test-output-timing.txt .build/test-output.txt | grep -a -E "^✘ .*(recorded an issue|failed)" \
        | grep -v "Test run with" | cut -c1-600 | head -n 60 || true
fi
# Swift Testing's summary lines last: the timing pass's, then the main one's.
{ grep -a -E "^(✔|✘) Test run with" .build/test-output-timing.txt || true; } | tail -n 1 | sed "s/^/timing pass: /"
{ grep -a -E "^(✔|✘) Test run with" .build/test-output.txt || true; } | tail -n 1
exit "$status"
