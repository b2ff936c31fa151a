#!/usr/bin/env bash
# Builds the DocC documentation of the library targets users import (Sources/<target>/<target>.docc and
# the public doc comments), with documentation warnings as errors: a broken ``symbol`` or <doc:article>
# link, an ambiguous one, a parameter left undocumented. Compiler warnings are the test build's job.
# swift-docc-plugin builds each target and extracts its symbol graph, then the toolchain's docc writes
# .build-docs/plugins/Swift-DocC/outputs/<target>.doccarchive. Its own scratch path, as the sanitizer builds
# have: the tests' coverage flags differ, so sharing .build would rebuild both ways on every run.
# A failing target prints docc's diagnostics, then a misleading "The file doesn't exist" about moving the
# archive that was never written: read the diagnostics above it.
# From an empty .build-docs it builds the libraries once (about 9 min on 2 busy cores, mostly
# swift-nio-ssl and swift-crypto); after that, about 30 s.
set -euo pipefail
cd "$(dirname "$0")/.."
targets="${BLIP_DOCS_TARGETS:-BLIP BLIPWebSocket}"
for target in $targets; do
    # --disable-indexing: no IDE index is needed; the archive is only checked.
    swift package --scratch-path .build-docs generate-documentation --target "$target" \
        --warnings-as-errors --disable-indexing
done
