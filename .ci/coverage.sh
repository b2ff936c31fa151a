#!/usr/bin/env bash
# Line coverage of Sources from the last `swift test --enable-code-coverage` run, by the toolchain's own
# llvm-cov (the llvm-cov on PATH may be Debian's older one, which cannot read Swift's profiles).
# The `blip` command-line tool and the fuzz entry points are left out: they are measured by their own
# tests and by fuzzing, not by the library's. Prints the table and a summary line; exits 1 below the floor.
set -euo pipefail
cd "$(dirname "$0")/.."
floor="${BLIP_COVERAGE_FLOOR:-85}"
toolchain="$(dirname "$(readlink -f "$(command -v swift)")")"
bin="$(swift build --show-bin-path)"
profile="$bin/codecov/default.profdata"
test -f "$profile" || { echo "coverage: no $profile (run swift test --enable-code-coverage first)" >&2; exit 1; }
"$toolchain/llvm-cov" report "$bin/swift-blipPackageTests.xctest" -instr-profile="$profile" \
    -ignore-filename-regex='(\.build|Tests|Sources/BLIPTool|Sources/BLIPFuzz)/' >.build/coverage.txt
# Per target, then the total.
python3 - "$floor" <<'PY'
import re, sys
floor = float(sys.argv[1])
targets, total = {}, None
for line in open(".build/coverage.txt"):
    fields = line.split()
    if len(fields) < 10:
        continue
    name = fields[0]
    lines, missed = fields[7], fields[8]
    if not (lines.isdigit() and missed.isdigit()):
        continue
    if name == "TOTAL":
        total = (int(lines), int(missed))
        continue
    # Paths are printed relative to the files' common folder (Sources/), or in full.
    match = re.search(r"(?:^|Sources/)([^/]+)/.+\.swift$", name)
    if match:
        t = targets.setdefault(match.group(1), [0, 0])
        t[0] += int(lines); t[1] += int(missed)
for name, (lines, missed) in sorted(targets.items()):
    print(f"  {name:<16} {100 * (lines - missed) / lines:6.2f}% of {lines} lines")
lines, missed = total
percent = 100 * (lines - missed) / lines
print(f"coverage: {percent:.2f}% of {lines} lines in Sources (blip CLI and fuzz entry points excluded)")
sys.exit(0 if percent >= floor else 1)
PY
