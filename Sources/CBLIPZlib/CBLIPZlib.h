#ifndef CBLIPZLIB_H
#define CBLIPZLIB_H

#include <zlib.h>

// zlib's init entry points are macros (they pass ZLIB_VERSION and sizeof(z_stream) so the
// library can check the caller's ABI). Swift cannot import function-like macros, so these
// shims make them callable.

static inline int CBLIPZlib_deflateInit2(z_streamp stream, int level, int windowBits, int memLevel) {
    return deflateInit2(stream, level, Z_DEFLATED, windowBits, memLevel, Z_DEFAULT_STRATEGY);
}

static inline int CBLIPZlib_inflateInit2(z_streamp stream, int windowBits) {
    return inflateInit2(stream, windowBits);
}

#endif
