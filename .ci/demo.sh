#!/usr/bin/env bash
# The README's first command: installs the two packages the build needs (not the tests' proxies, HAProxy
# or browser), builds the blip tool and runs `blip demo`: two BLIP peers over a real loopback WebSocket.
# It builds with the test build's flags (coverage, warnings as errors), so that `bash .ci/test.sh`
# afterwards finds every module the tool needs (NIO, the library) already built and compiles only the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/setup.sh
flags=(--enable-code-coverage -Xswiftc -warnings-as-errors)
swift build "${flags[@]}" --product blip
# The coverage build's profile of this run is of no use: it goes nowhere.
LLVM_PROFILE_FILE=/dev/null "$(swift build "${flags[@]}" --show-bin-path)/blip" demo "$@"
