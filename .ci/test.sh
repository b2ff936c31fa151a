#!/usr/bin/env bash
# The README's test command: set up a fresh machine, build with warnings as errors, run every test (with
# code coverage, so that .ci/coverage.sh can report it without a second build).
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/setup.sh
swift build --build-tests --enable-code-coverage -Xswiftc -warnings-as-errors
swift test --skip-build --enable-code-coverage 2>&1 | tee .build/test-output.txt
# `swift test` exits non-zero on failure (pipefail carries it); print Swift Testing's summary line last.
grep -E "^(✔|✘) Test run with" .build/test-output.txt | tail -n 1
