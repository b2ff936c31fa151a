#!/usr/bin/env bash
# Builds the DocC documentation of the library targets users import (Sources/<target>/<target>.docc and
# the public doc comments), with documentation warnings as errors: a broken ``symbol`` or <doc:article>
# link, an ambiguous one, a parameter left undocumented. Compiler warnings are the test build's job.
#
# The symbol graphs come from the modules the test build (.ci/test.sh) has already compiled
# (.ci/symbol-graphs.sh), and docc converts each catalog into .build/docs/<target>.doccarchive, and again
# into a static site under .build/docs/site/<target> (one page per symbol and article;
# .build/docs/site/index.html links the modules), readable through any static file server, e.g.
# `blip serve --static .build/docs/site`. The plugin would have built every library again in a scratch path
# of its own (about 6 min of a fresh CI machine's 35); the graphs it extracted held the same symbols and
# relationships.
# The first step is the test build's own command: nothing to do when it has run, a build when it has not.
# Up to date, this takes about 15 s.
set -euo pipefail
cd "$(dirname "$0")/.."
swift build --build-tests --enable-code-coverage -Xswiftc -warnings-as-errors
source .ci/symbol-graphs.sh
targets="${BLIP_DOCS_TARGETS:-BLIP BLIPWebSocket BLIPWebBridge BLIPHummingbird}"
for target in $targets; do
    graphs=".build/docs/symbol-graphs/$target"
    rm -rf ".build/docs/$target.doccarchive"
    extract_symbol_graphs "$target" "$graphs"
    "$toolchain/docc" convert "Sources/$target/$target.docc" --warnings-as-errors \
        --fallback-display-name "$target" --fallback-bundle-identifier "$target" \
        --additional-symbol-graph-dir "$graphs" --output-path ".build/docs/$target.doccarchive"
    rm -rf ".build/docs/site/$target"
    mkdir -p .build/docs/site
    "$toolchain/docc" process-archive transform-for-static-hosting ".build/docs/$target.doccarchive" \
        --hosting-base-path "$target" --output-path ".build/docs/site/$target"
    echo "docs: $target ok ($(find "$graphs" -name '*.symbols.json' | wc -l) symbol graphs)"
done
# The site's front page: one link per module.
{
    echo '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>swift-blip documentation</title></head>'
    echo '<body><h1>swift-blip documentation</h1><ul>'
    for target in $targets; do
        lower="$(echo "$target" | tr '[:upper:]' '[:lower:]')"
        echo "<li><a href=\"$target/documentation/$lower/\">$target</a></li>"
    done
    echo '</ul></body></html>'
} > .build/docs/site/index.html
echo "docs: site in .build/docs/site (read it with: blip serve --static .build/docs/site)"
