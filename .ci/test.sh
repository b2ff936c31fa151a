#!/usr/bin/env bash
# The README's test command: set up a fresh machine, build with warnings as errors, run every test (with
# code coverage, so that .ci/coverage.sh can report it without a second build).
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/setup.sh
swift build --build-tests --enable-code-coverage -Xswiftc -warnings-as-errors
# The suites run in parallel in one process, hundreds of sockets at a time: lift a soft limit of 1024
# (a common default) towards the hard one.
hard=$(ulimit -Hn)
if [ "$hard" = unlimited ] || [ "$hard" -gt 65536 ]; then hard=65536; fi
ulimit -n "$hard" 2>/dev/null || true
status=0
swift test --skip-build --enable-code-coverage 2>&1 | tee .build/test-output.txt || status=$?
# Logs can bury a failure far above the end of the output: repeat every recorded issue here.
if [ "$status" -ne 0 ]; then
    echo "== failures"
    grep -a -E "^✘ .*(recorded an issue|failed)" .build/test-output.txt | grep -v "Test run with" | cut -c1-600 | head -n 60 || true
fi
# Swift Testing's summary line last.
grep -a -E "^(✔|✘) Test run with" .build/test-output.txt | tail -n 1
exit "$status"
