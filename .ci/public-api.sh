#!/usr/bin/env bash
# The public surface of the library modules users import. Two counts per module and in all:
#   - declarations: those written `public` or `open` in Sources/<module> (imports aside), the measure
#     the API's limit is set in;
#   - symbols: what the module's symbol graph holds as public (what DocC and the compiler see: members a
#     type gets from `public` extensions, enum cases and protocol requirements count one each).
# Fails when:
#   - the declarations are more than .ci/public-api-limit (700: a surface a user can learn; it was 986), or
#   - any public symbol mentions NIO's TimeAmount (times are Swift's Duration).
# The graphs come from the modules the test build (.ci/test.sh) compiled; this runs that build's command
# first, which does nothing when it has run.
set -euo pipefail
cd "$(dirname "$0")/.."
swift build --build-tests --enable-code-coverage -Xswiftc -warnings-as-errors > /dev/null
source .ci/symbol-graphs.sh
modules="${BLIP_PUBLIC_MODULES:-BLIPWire BLIPEngine BLIP BLIPWebSocket BLIPWebBridge BLIPHummingbird BLIPInspection}"
root=".build/public-api"
rm -rf "$root"
for module in $modules; do
    extract_symbol_graphs "$module" "$root/$module"
done
python3 - "$root" "$(cat .ci/public-api-limit)" $modules <<'PY'
import glob, json, os, re, sys
root, limit, modules = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
declaration = re.compile(r"^\s*(@\w+(\([^)]*\))?\s+)*(public|open)\s+(?!import\b)")
total, total_symbols, time_amounts = 0, 0, []
for module in modules:
    declarations = 0
    for path in glob.glob(os.path.join("Sources", module, "**", "*.swift"), recursive=True):
        declarations += sum(1 for line in open(path) if declaration.match(line))
    count = 0
    for path in glob.glob(os.path.join(root, module, "*.symbols.json")):
        for symbol in json.load(open(path))["symbols"]:
            kind = symbol["kind"]["identifier"]
            if kind in ("swift.extension", "swift.module"):
                continue  # an extension block is not a declaration of its own
            count += 1
            fragments = symbol.get("declarationFragments", [])
            if any(f.get("spelling") == "TimeAmount" for f in fragments):
                time_amounts.append("%s: %s" % (module, "".join(f["spelling"] for f in fragments)))
    print("public-api: %-16s %5d declarations %5d symbols" % (module, declarations, count))
    total += declarations
    total_symbols += count
print("public-api: %-16s %5d declarations %5d symbols (limit: %d declarations)" % ("total", total, total_symbols, limit))
failed = False
for line in time_amounts:
    print("public-api: TimeAmount in a public declaration: " + line)
    failed = True
if total > limit:
    print("public-api: %d public declarations, more than the limit of %d" % (total, limit))
    failed = True
sys.exit(1 if failed else 0)
PY
