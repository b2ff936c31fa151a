# Sourced by .ci/docs.sh and .ci/public-api.sh: extracts a module's public symbol graph from the modules the
# test build (.ci/test.sh) compiled, with the options swift-docc-plugin uses (public symbols, extension
# blocks). Run from the package root after that build. The C modules' include paths and module maps come
# from SwiftPM's build description.
symbol_graph_bin="$(swift build --enable-code-coverage --show-bin-path)"
toolchain="$(dirname "$(readlink -f "$(command -v swift)")")"
symbol_graph_triple="$(swift -print-target-info \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["target"]["triple"])')"
# Every C module map and header path the package's compiles use, for the modules the libraries import.
mapfile -t symbol_graph_clang_args < <(python3 - .build/debug.yaml <<'PY'
import re, sys
description = open(sys.argv[1]).read()
maps = set(re.findall(r'"-Xcc","(-fmodule-map-file=[^"]*)"', description))
includes = {"-I" + path for path in re.findall(r'"-Xcc","-I","-Xcc","([^"]*)"', description)}
for argument in sorted(maps | includes):
    print("-Xcc")
    print(argument)
PY
)

# extract_symbol_graphs MODULE FOLDER: MODULE's public symbol graphs into FOLDER (emptied first).
extract_symbol_graphs() {
    rm -rf "$2"
    mkdir -p "$2"
    "$toolchain/swift-symbolgraph-extract" -module-name "$1" -target "$symbol_graph_triple" \
        -I "$symbol_graph_bin/Modules" "${symbol_graph_clang_args[@]}" -minimum-access-level public \
        -emit-extension-block-symbols -output-dir "$2"
}
