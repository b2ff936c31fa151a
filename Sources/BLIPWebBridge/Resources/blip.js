// blip.js — a BLIP 3 client for browsers (ES module, no dependencies).
//
// BLIP multiplexes requests and replies over one WebSocket (protocol digest §7, dialect "D4"):
//   frame   = varint number, varint flags, frame data, u32 big-endian CRC-32 (no CRC on ACK frames)
//   message = varint property-block length, "key\0value\0..." (UTF-8, no tokens), body
// A message is cut into frames that interleave with other messages' frames; requests and
// replies are matched by number; ACK frames throttle big messages (at most 128 000 bytes of one
// message unacknowledged).
//
// What this client does:
//   * One running CRC-32 per direction, written on every frame we send and checked on every frame
//     we receive (a mismatch is a protocol error that closes the connection).
//   * Flow control both ways: we ACK incoming multi-frame messages every 50 000 wire bytes, and we
//     pause a message of ours while sending its next frame would leave more than 128 000 of its
//     bytes unacknowledged (stricter than LiteCore, which checks after the frame). A message with
//     nothing unacknowledged never waits, and frames are at most 65 536 bytes, so once the peer's
//     ACK (due every 50 000 bytes) arrives at most 50 000 + 65 540 < 128 000 bytes are out: a
//     message only stalls if the peer stops ACKing.
//   * What the peer can make us hold is bounded: messages it has started but not finished (plus
//     requests waiting for a handler), the bytes they hold, and handlers running at once.
//   * The out-box follows the digest's §7.9 rules (LiteCore's variant), so an urgent message is
//     not stuck behind a big normal one, and the big one keeps moving too.
//   * Incoming compressed frames are inflated by RawInflater below: one raw-deflate stream per
//     direction, each frame sync-flushed with its trailing 00 00 FF FF stripped (§7.5).
//   * OUTGOING FRAMES ARE NEVER COMPRESSED. The browser's CompressionStream cannot sync-flush at a
//     frame boundary, and a frame must end on one for the peer to inflate it, so every frame we
//     send is plain (allowed: the compressed flag is per frame, and peers accept either).
//   * Browsers only let a page close a WebSocket with 1000 or 3000-4999. A protocol error is
//     reported locally as 1002 (1009 for an oversized message or buffer, 1008 for too many messages
//     at once), but on the wire it becomes 4002 (4009, 4008): the same meaning in the private-use range.

// ---------------------------------------------------------------------------------------------
// Constants (digest §7.2, §7.7, §7.8, §7.13)

const TYPE_MSG = 0;
const TYPE_RPY = 1;
const TYPE_ERR = 2;
const TYPE_ACKMSG = 4;
const TYPE_ACKRPY = 5;
const TYPE_MASK = 0x07;
const FLAG_COMPRESSED = 0x08;
const FLAG_URGENT = 0x10;
const FLAG_NOREPLY = 0x20;
const FLAG_MORE = 0x40;

const TYPE_NAMES = { [TYPE_MSG]: 'MSG', [TYPE_RPY]: 'RPY', [TYPE_ERR]: 'ERR' };

const ACK_INTERVAL = 50000; // we ACK once this many bytes of a message arrived since the last ACK
const MAX_UNACKED = 128000; // we never let more than this of one message go unacknowledged
const MAX_PROPERTIES_SIZE = 100 * 1024; // LiteCore's limit, fatal both ways
// One compressed frame may inflate to far more than its 16 KiB (LiteCore fills frames by compressed
// size: 150 KB of text is usual), but not without bound: more than this is a decompression bomb.
const MAX_INFLATED_FRAME = 16 * 1024 * 1024;
const DEFAULT_FRAME_SIZE = 16384;
// Frames must stay well below the 128 000-byte window (see the header) and above any header + CRC.
const MIN_FRAME_SIZE = 64;
const MAX_FRAME_SIZE = 65536;
const DEFAULT_MAX_IN_PROGRESS = 1024; // as the Swift side's maximumIncomingMessagesInFlight
const DEFAULT_INCOMING_BUDGET = 128 * 1024 * 1024;
const DEFAULT_MAX_HANDLERS = 512;
const DEFAULT_MAX_MESSAGE = 64 * 1024 * 1024;
const DEFAULT_SEND_BUFFER_LIMIT = 1024 * 1024;
const DEFAULT_PROTOCOLS = ['BLIP_3+CBMobile_3', 'BLIP_3+CBMobile_2'];
/** Sync Gateway 3.3+ takes a one-time session token as an extra subprotocol entry (browsers cannot set headers). */
const SESSION_TOKEN_PREFIX = 'SyncGatewaySession_';
/** What a keepalive that got no answer closes with: IANA's "timeout" (browsers allow 1000 and 3000-4999). */
const CLOSE_KEEPALIVE_TIMEOUT = 3008;
const MAX_REQUEST_NUMBER = 0xffffffff; // go-blip and Cocoa peers keep request numbers in 32 bits
const SYNC_FLUSH_TRAILER = new Uint8Array([0x00, 0x00, 0xff, 0xff]);

const CLOSE_PROTOCOL_ERROR = 1002;
const CLOSE_POLICY_VIOLATION = 1008;
const CLOSE_TOO_BIG = 1009;
const CLOSE_INTERNAL_ERROR = 1011;

const utf8Encoder = new TextEncoder();
const utf8Decoder = new TextDecoder('utf-8'); // bodies: lenient
const strictUTF8Decoder = new TextDecoder('utf-8', { fatal: true }); // properties must be valid UTF-8

// ---------------------------------------------------------------------------------------------
// Errors

/** An ERR reply from the peer (or one our handler sends). */
export class BLIPError extends Error {
  /**
   * @param {string} domain e.g. "BLIP" or "HTTP"
   * @param {number} code e.g. 404
   * @param {string} [message] the human-readable message (an ERR's body)
   * @param {Object<string,string>} [properties] all properties of the ERR message
   */
  constructor(domain, code, message = '', properties = {}) {
    super(message);
    this.name = 'BLIPError';
    this.domain = domain;
    this.code = code;
    this.properties = properties;
  }
}

/** The connection closed (or never opened) before the operation could complete. */
export class BLIPConnectionClosedError extends Error {
  /**
   * @param {number} code the WebSocket close code
   * @param {string} reason the close reason
   * @param {Error} [cause] what made us close, e.g. a BLIPProtocolError
   */
  constructor(code, reason = '', cause = undefined) {
    super(`BLIP connection closed (${code}${reason ? ': ' + reason : ''})`);
    this.name = 'BLIPConnectionClosedError';
    this.code = code;
    this.reason = reason;
    if (cause !== undefined) this.cause = cause;
  }
}

/** The peer broke the protocol (bad frame, CRC mismatch, bad numbering, invalid deflate data...). */
export class BLIPProtocolError extends Error {
  /**
   * @param {string} message what was wrong
   * @param {number} [closeCode] 1002, 1009 when a message or the buffered bytes were too big,
   *   1008 when the peer had too many messages going at once
   */
  constructor(message, closeCode = CLOSE_PROTOCOL_ERROR) {
    super(message);
    this.name = 'BLIPProtocolError';
    this.closeCode = closeCode;
  }
}

// ---------------------------------------------------------------------------------------------
// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), digest §7.6

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

/**
 * CRC-32 of `bytes`, continuing from a previous value (zlib's `crc32(crc, buf, len)` semantics:
 * `crc32(b, crc32(a))` equals `crc32(a + b)`).
 * @param {Uint8Array} bytes
 * @param {number} [crc=0] the CRC of the data before `bytes`
 * @returns {number} unsigned 32-bit CRC
 */
export function crc32(bytes, crc = 0) {
  let c = (crc ^ 0xffffffff) >>> 0;
  for (let i = 0; i < bytes.length; i++) c = CRC_TABLE[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

// ---------------------------------------------------------------------------------------------
// Varints (unsigned LEB128, digest §3). Numbers stay exact up to 2^53; that is far beyond any
// request number or byte count BLIP peers use.

function varintLength(value) {
  let n = 1;
  while (value >= 0x80) {
    value = Math.floor(value / 128);
    n++;
  }
  return n;
}

function writeVarint(buffer, offset, value) {
  while (value >= 0x80) {
    buffer[offset++] = (value % 128) | 0x80;
    value = Math.floor(value / 128);
  }
  buffer[offset++] = value;
  return offset;
}

/** Returns [value, nextOffset], or null when the bytes end mid-varint. Throws on > 10 bytes. */
function readVarint(bytes, offset) {
  let value = 0;
  let scale = 1;
  for (let i = 0; i < 10; i++) {
    if (offset >= bytes.length) return null;
    const b = bytes[offset++];
    value += (b & 0x7f) * scale;
    if (b < 0x80) {
      if (value > Number.MAX_SAFE_INTEGER) throw new BLIPProtocolError('varint too large');
      return [value, offset];
    }
    scale *= 128;
  }
  throw new BLIPProtocolError('varint longer than 10 bytes');
}

function concatBytes(chunks, totalLength) {
  if (chunks.length === 1) return chunks[0];
  const out = new Uint8Array(totalLength);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// RawInflater: RFC 1951 raw DEFLATE decoder that keeps its 32 KiB window between calls.

// Length codes 257..285 and distance codes 0..29: base values and extra bits (RFC 1951 §3.2.5).
const LENGTH_BASE = [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258];
const LENGTH_EXTRA = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0];
const DIST_BASE = [1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577];
const DIST_EXTRA = [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13];
const CODE_LENGTH_ORDER = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15];
const WINDOW_SIZE = 32768;

/**
 * A canonical Huffman code as a single lookup table indexed by the next `bits` input bits (which
 * arrive least-significant first, so codes are stored bit-reversed). Each entry is
 * `symbol << 4 | codeLength`; 0 marks a bit pattern that no code uses.
 */
class HuffmanTable {
  constructor(lengths) {
    let maxLength = 0;
    const counts = new Uint16Array(16);
    for (const len of lengths) {
      counts[len]++;
      if (len > maxLength) maxLength = len;
    }
    counts[0] = 0;
    // Reject over-subscribed codes; incomplete ones are allowed (RFC 1951 permits a lone
    // distance code), and their unused patterns decode as errors.
    let left = 1;
    for (let len = 1; len <= 15; len++) {
      left = left * 2 - counts[len];
      if (left < 0) throw new BLIPProtocolError('invalid deflate data: over-subscribed Huffman code');
    }
    const nextCode = new Uint16Array(16);
    for (let len = 1, code = 0; len <= 15; len++) {
      code = (code + counts[len - 1]) << 1;
      nextCode[len] = code;
    }
    this.bits = Math.max(maxLength, 1);
    this.table = new Uint16Array(1 << this.bits);
    for (let symbol = 0; symbol < lengths.length; symbol++) {
      const len = lengths[symbol];
      if (len === 0) continue;
      let code = nextCode[len]++;
      let reversed = 0;
      for (let i = 0; i < len; i++) {
        reversed = (reversed << 1) | (code & 1);
        code >>= 1;
      }
      const entry = (symbol << 4) | len;
      for (let i = reversed; i < this.table.length; i += 1 << len) this.table[i] = entry;
    }
  }
}

const FIXED_LITLEN = (() => {
  const lengths = new Uint8Array(288);
  lengths.fill(8, 0, 144);
  lengths.fill(9, 144, 256);
  lengths.fill(7, 256, 280);
  lengths.fill(8, 280, 288);
  return new HuffmanTable(lengths);
})();
const FIXED_DIST = new HuffmanTable(new Uint8Array(30).fill(5));

/**
 * Raw DEFLATE (RFC 1951) decoder with a persistent 32 KiB window, as BLIP 3 needs: every
 * compressed frame continues the same stream, and back-references may reach into earlier frames.
 *
 * Each call to {@link RawInflater#inflate} must be given input that ends on a block boundary:
 * a BLIP frame's data with `00 00 FF FF` appended (the end of a sync flush's empty stored block),
 * or a whole stream ending with its final block (e.g. CompressionStream('deflate-raw') output).
 */
export class RawInflater {
  constructor() {
    this.history = new Uint8Array(0); // last ≤ 32 KiB of output, for back-references
    this.finished = false; // a block marked final was decoded
    this.totalOut = 0;
  }

  /**
   * Inflates one chunk of the stream.
   * @param {Uint8Array} input compressed bytes ending on a block boundary
   * @param {number} [maxOutput=Infinity] output larger than this throws a BLIPProtocolError (closeCode 1009)
   * @returns {Uint8Array} the decompressed bytes of this chunk
   */
  inflate(input, maxOutput = Infinity) {
    if (this.finished) {
      if (input.length === 0) return new Uint8Array(0);
      throw new BLIPProtocolError('invalid deflate data: input after the final block');
    }
    const histLen = this.history.length;
    // Output buffer = [history | new output], so a back-reference is a copy within one array.
    let capacity = histLen + Math.min(Math.max(input.length * 4, 4096), maxOutput + 258);
    let out = new Uint8Array(capacity);
    out.set(this.history, 0);
    let outPos = histLen;
    const outLimit = histLen + maxOutput;

    let inPos = 0;
    let bitBuf = 0;
    let bitCnt = 0;
    const inLen = input.length;

    const truncated = () => new BLIPProtocolError('invalid deflate data: input ends inside a block');
    const tooBig = () => new BLIPProtocolError(`inflated data exceeds the limit of ${maxOutput} bytes`, CLOSE_TOO_BIG);
    const ensure = (extra) => {
      const needed = outPos + extra;
      if (needed > outLimit) throw tooBig();
      if (needed <= capacity) return;
      while (capacity < needed) capacity *= 2;
      capacity = Math.min(capacity, outLimit + 258);
      const bigger = new Uint8Array(capacity);
      bigger.set(out.subarray(0, outPos));
      out = bigger;
    };
    const bits = (n) => {
      while (bitCnt < n) {
        if (inPos >= inLen) throw truncated();
        bitBuf |= input[inPos++] << bitCnt;
        bitCnt += 8;
      }
      const v = bitBuf & ((1 << n) - 1);
      bitBuf >>>= n;
      bitCnt -= n;
      return v;
    };
    const decode = (huff) => {
      // Fill as far as the input allows; past its end the missing bits read as zero, and a code
      // that would need them is reported as truncation.
      while (bitCnt < huff.bits && inPos < inLen) {
        bitBuf |= input[inPos++] << bitCnt;
        bitCnt += 8;
      }
      const entry = huff.table[bitBuf & ((1 << huff.bits) - 1)];
      const len = entry & 15;
      if (len === 0) throw new BLIPProtocolError('invalid deflate data: invalid Huffman code');
      if (len > bitCnt) throw truncated();
      bitBuf >>>= len;
      bitCnt -= len;
      return entry >> 4;
    };

    // Input done = all bytes consumed and only padding bits (< 8) left.
    while (inPos < inLen || bitCnt >= 8) {
      const final = bits(1);
      const type = bits(2);
      if (type === 0) {
        // Stored block: skip to a byte boundary, then LEN and its complement NLEN.
        bitBuf >>>= bitCnt & 7;
        bitCnt -= bitCnt & 7;
        const len = bits(16);
        const nlen = bits(16);
        if ((len ^ 0xffff) !== nlen) throw new BLIPProtocolError('invalid deflate data: invalid stored block lengths');
        ensure(len);
        let copied = 0;
        while (copied < len && bitCnt >= 8) {
          out[outPos++] = bitBuf & 0xff;
          bitBuf >>>= 8;
          bitCnt -= 8;
          copied++;
        }
        const rest = len - copied;
        if (inPos + rest > inLen) throw truncated();
        out.set(input.subarray(inPos, inPos + rest), outPos);
        inPos += rest;
        outPos += rest;
      } else if (type === 1 || type === 2) {
        let litlen = FIXED_LITLEN;
        let dist = FIXED_DIST;
        if (type === 2) [litlen, dist] = this._readDynamicTables(bits, decode);
        for (;;) {
          const symbol = decode(litlen);
          if (symbol < 256) {
            if (outPos >= capacity) ensure(1);
            else if (outPos >= outLimit) throw tooBig();
            out[outPos++] = symbol;
          } else if (symbol === 256) {
            break;
          } else {
            const li = symbol - 257;
            if (li >= 29) throw new BLIPProtocolError('invalid deflate data: invalid length code');
            const length = LENGTH_BASE[li] + bits(LENGTH_EXTRA[li]);
            const di = decode(dist);
            if (di >= 30) throw new BLIPProtocolError('invalid deflate data: invalid distance code');
            const distance = DIST_BASE[di] + bits(DIST_EXTRA[di]);
            if (distance > outPos) throw new BLIPProtocolError('invalid deflate data: distance too far back');
            ensure(length);
            let from = outPos - distance;
            if (distance >= length) {
              out.copyWithin(outPos, from, from + length);
              outPos += length;
            } else {
              for (let i = 0; i < length; i++) out[outPos++] = out[from++]; // overlapping run
            }
          }
        }
      } else {
        throw new BLIPProtocolError('invalid deflate data: invalid block type');
      }
      if (final) {
        this.finished = true;
        break;
      }
    }
    if (!this.finished && bitCnt !== 0 && bitBuf !== 0) {
      // A sync-flushed chunk ends byte-aligned; leftover set bits mean it did not end on a block boundary.
      throw truncated();
    }

    // Keep the last 32 KiB (history + new output) for the next chunk.
    const keepFrom = Math.max(0, outPos - WINDOW_SIZE);
    this.history = out.slice(keepFrom, outPos);
    this.totalOut += outPos - histLen;
    return out.slice(histLen, outPos);
  }

  _readDynamicTables(bits, decode) {
    const hlit = bits(5) + 257;
    const hdist = bits(5) + 1;
    const hclen = bits(4) + 4;
    if (hlit > 286 || hdist > 30) throw new BLIPProtocolError('invalid deflate data: too many length or distance codes');
    const codeLengthLengths = new Uint8Array(19);
    for (let i = 0; i < hclen; i++) codeLengthLengths[CODE_LENGTH_ORDER[i]] = bits(3);
    const codeLengthTable = new HuffmanTable(codeLengthLengths);
    const lengths = new Uint8Array(hlit + hdist);
    for (let i = 0; i < lengths.length; ) {
      const symbol = decode(codeLengthTable);
      if (symbol < 16) {
        lengths[i++] = symbol;
        continue;
      }
      let repeat;
      let value = 0;
      if (symbol === 16) {
        if (i === 0) throw new BLIPProtocolError('invalid deflate data: repeat with no previous length');
        value = lengths[i - 1];
        repeat = 3 + bits(2);
      } else if (symbol === 17) {
        repeat = 3 + bits(3);
      } else {
        repeat = 11 + bits(7);
      }
      if (i + repeat > lengths.length) throw new BLIPProtocolError('invalid deflate data: too many code lengths');
      lengths.fill(value, i, i + repeat);
      i += repeat;
    }
    if (lengths[256] === 0) throw new BLIPProtocolError('invalid deflate data: no end-of-block code');
    return [new HuffmanTable(lengths.subarray(0, hlit)), new HuffmanTable(lengths.subarray(hlit))];
  }
}

// ---------------------------------------------------------------------------------------------
// Properties (digest §7.3)

function encodeProperties(pairs) {
  const parts = [];
  let size = 0;
  const seen = new Set();
  for (const [key, value] of pairs) {
    if (seen.has(key)) throw new TypeError(`duplicate BLIP property "${key}"`); // go-blip rejects them (trap 19)
    seen.add(key);
    for (const s of [key, value]) {
      if (s.includes('\0')) throw new TypeError('BLIP property names and values cannot contain NUL');
      const bytes = utf8Encoder.encode(s);
      parts.push(bytes);
      size += bytes.length + 1;
    }
  }
  if (size > MAX_PROPERTIES_SIZE) throw new RangeError(`BLIP properties are ${size} bytes; the limit is ${MAX_PROPERTIES_SIZE}`);
  const block = new Uint8Array(varintLength(size) + size);
  let at = writeVarint(block, 0, size);
  for (const p of parts) {
    block.set(p, at);
    at += p.length + 1; // the NUL is already 0
  }
  return block;
}

/** Splits a complete message's data into [propertyList, body]. */
function decodeMessageData(data) {
  const header = readVarint(data, 0);
  if (header === null) throw new BLIPProtocolError('message ends inside its property length');
  const [size, start] = header;
  if (size > MAX_PROPERTIES_SIZE) throw new BLIPProtocolError(`property block of ${size} bytes exceeds ${MAX_PROPERTIES_SIZE}`);
  if (start + size > data.length) throw new BLIPProtocolError('message ends inside its properties');
  const pairs = [];
  if (size > 0) {
    if (data[start + size - 1] !== 0) throw new BLIPProtocolError('property block is not NUL-terminated');
    const strings = [];
    let from = start;
    for (let i = start; i < start + size; i++) {
      if (data[i] === 0) {
        try {
          strings.push(strictUTF8Decoder.decode(data.subarray(from, i)));
        } catch {
          throw new BLIPProtocolError('property string is not valid UTF-8');
        }
        from = i + 1;
      }
    }
    if (strings.length % 2 !== 0) throw new BLIPProtocolError('property block has an odd number of strings');
    const seen = new Set();
    for (let i = 0; i < strings.length; i += 2) {
      // go-blip refuses duplicates, LiteCore would read the first: the meaning is ambiguous, so refuse.
      if (seen.has(strings[i])) throw new BLIPProtocolError(`duplicate property name "${strings[i]}"`);
      seen.add(strings[i]);
      pairs.push([strings[i], strings[i + 1]]);
    }
  }
  return [pairs, data.subarray(start + size)];
}

// ---------------------------------------------------------------------------------------------
// Messages

/** A received BLIP message: a request from the peer, or a reply (RPY/ERR) to one of ours. */
export class BLIPMessage {
  /** @internal */
  constructor({ number, type, propertyList, body, urgent, noReply, compressed }) {
    /** @type {number} request number (a reply carries its request's number) */
    this.number = number;
    /** @type {'MSG'|'RPY'|'ERR'} */
    this.type = type;
    /** @type {Array<[string,string]>} properties in wire order */
    this.propertyList = propertyList;
    /** @type {Object<string,string>} properties as an object */
    this.properties = Object.fromEntries(propertyList);
    /** @type {Uint8Array} */
    this.body = body;
    /** @type {boolean} */
    this.urgent = urgent;
    /** @type {boolean} */
    this.noReply = noReply;
    /** @type {boolean} at least one frame arrived compressed */
    this.compressed = compressed;
  }

  /** @returns {string|undefined} the `Profile` property */
  get profile() {
    return this.properties.Profile;
  }

  /** @returns {string} the body decoded as UTF-8 */
  text() {
    return utf8Decoder.decode(this.body);
  }

  /** @returns {any} the body parsed as JSON */
  json() {
    return JSON.parse(this.text());
  }
}

// ---------------------------------------------------------------------------------------------
// Receiving: one direction's frames → messages and ACKs. Shared by BLIPConnection and
// decodeCapturedFrames so both check the same things.

class FrameReceiver {
  /**
   * @param {object} options
   * @param {number} options.maxMessageSize largest body accepted (inclusive)
   * @param {number} [options.maxInProgress] most messages started and not yet handled (1008 beyond)
   * @param {number} [options.budget] most bytes held by those messages (1009 beyond)
   * @param {(number:number)=>boolean} [options.isAwaitedReply] for a live connection: whether a
   *   reply with this number may start now (captures have no such context)
   * @param {(type:number, number:number, bytes:number)=>void} [options.sendAck]
   */
  constructor({
    maxMessageSize, maxInProgress = DEFAULT_MAX_IN_PROGRESS, budget = DEFAULT_INCOMING_BUDGET,
    isAwaitedReply = null, sendAck = null,
  }) {
    this.maxMessageSize = maxMessageSize;
    this.maxInProgress = maxInProgress;
    this.budget = budget;
    this.isAwaitedReply = isAwaitedReply;
    this.sendAck = sendAck;
    this.crc = 0;
    this.inflater = new RawInflater();
    this.lastRequestNumber = 0;
    this.partial = new Map(); // "M5" / "R5" → message being assembled
    this.partialBytes = 0; // data bytes held in `partial`
    // Complete requests the connection holds until a handler is free: the peer made us keep them
    // too, so they count against the same limits.
    this.queuedMessages = 0;
    this.queuedBytes = 0;
    this.compressedFrames = 0;
  }

  /**
   * Processes one frame. Returns null (nothing complete yet / ignored), {ack} or {message}.
   * Throws BLIPProtocolError for anything the peer got wrong.
   */
  receive(frame) {
    const head = readVarint(frame, 0);
    const flagsField = head && readVarint(frame, head[1]);
    if (!flagsField) throw new BLIPProtocolError('illegal frame header');
    const number = head[0];
    const flags = flagsField[0] & 0xff; // unknown bits beyond 8 are ignored, as LiteCore and go-blip do
    const offset = flagsField[1];
    const type = flags & TYPE_MASK;

    if (type === TYPE_ACKMSG || type === TYPE_ACKRPY) {
      const count = readVarint(frame, offset);
      if (!count) return null; // unparsable ACK body: both real peers ignore it
      return { ack: { type: type === TYPE_ACKMSG ? 'ACKMSG' : 'ACKRPY', number, bytes: count[0] } };
    }
    if (type !== TYPE_MSG && type !== TYPE_RPY && type !== TYPE_ERR) {
      return null; // types 3, 6, 7: ignored without touching CRC or inflater, like LiteCore
    }
    if (frame.length < offset + 4) throw new BLIPProtocolError('frame shorter than its checksum');
    const wireBody = frame.subarray(offset, frame.length - 4);
    const end = frame.length;
    const expectedCRC = ((frame[end - 4] << 24) | (frame[end - 3] << 16) | (frame[end - 2] << 8) | frame[end - 1]) >>> 0;

    // The CRC and inflate stream belong to the whole direction, so they run first (as in the
    // reference decoder); then the frame is matched to its message.
    const key = (type === TYPE_MSG ? 'M' : 'R') + number;
    let msg = this.partial.get(key);
    // Bound inflation by what the message may still hold and by the per-frame cap.
    const messageRoom = Math.max(0, this.maxMessageSize + MAX_PROPERTIES_SIZE + 10 - (msg ? msg.length : 0));
    let data = wireBody;
    if (flags & FLAG_COMPRESSED) {
      this.compressedFrames++;
      // An empty compressed frame adds nothing; feeding the bare trailer would corrupt the stream (trap 10).
      if (wireBody.length > 0) {
        const input = new Uint8Array(wireBody.length + 4);
        input.set(wireBody, 0);
        input.set(SYNC_FLUSH_TRAILER, wireBody.length);
        try {
          data = this.inflater.inflate(input, Math.min(messageRoom, MAX_INFLATED_FRAME));
        } catch (e) {
          if (e.closeCode === CLOSE_TOO_BIG && messageRoom > MAX_INFLATED_FRAME) {
            throw new BLIPProtocolError(`compressed frame inflates to more than ${MAX_INFLATED_FRAME} bytes`);
          }
          throw e;
        }
      }
    } else {
      data = wireBody.slice(); // the frame buffer may be reused by the caller
    }
    this.crc = crc32(data, this.crc);
    if (this.crc !== expectedCRC) {
      throw new BLIPProtocolError(`checksum mismatch on ${TYPE_NAMES[type]} #${number}: computed ${hex32(this.crc)}, frame says ${hex32(expectedCRC)}`);
    }

    if (!msg) {
      if (type === TYPE_MSG) {
        // Numbering is strict in every real peer (trap 16).
        if (number !== this.lastRequestNumber + 1) {
          throw new BLIPProtocolError(number <= this.lastRequestNumber
            ? `frame for finished request #${number}`
            : `request #${number} out of order (expected #${this.lastRequestNumber + 1})`);
        }
        this.lastRequestNumber = number;
      } else if (this.isAwaitedReply && !this.isAwaitedReply(number)) {
        throw new BLIPProtocolError(`reply #${number} does not answer a pending request`);
      }
      if (this.partial.size + this.queuedMessages >= this.maxInProgress) {
        throw new BLIPProtocolError(`more than ${this.maxInProgress} incoming messages in progress`, CLOSE_POLICY_VIOLATION);
      }
      msg = {
        number, type, flags, chunks: [], length: 0, frames: 0, wireBytes: 0, unackedBytes: 0,
        compressed: false, bodyStart: -1, prefix: new Uint8Array(0),
      };
      this.partial.set(key, msg);
    }
    if (flags & FLAG_COMPRESSED) msg.compressed = true;

    msg.frames++;
    if (data.length > 0) { // empty more-coming frames add nothing worth keeping
      msg.chunks.push(data);
      msg.length += data.length;
      this.partialBytes += data.length;
      if (this.partialBytes + this.queuedBytes > this.budget) {
        throw new BLIPProtocolError(`incoming messages hold more than the ${this.budget}-byte budget`, CLOSE_TOO_BIG);
      }
    }
    if (msg.bodyStart < 0 && data.length > 0) {
      // The property length is a varint of at most 10 bytes: collect just those across frames
      // instead of joining every chunk again on each frame.
      const take = Math.min(10 - msg.prefix.length, data.length);
      const prefix = new Uint8Array(msg.prefix.length + take);
      prefix.set(msg.prefix, 0);
      prefix.set(data.subarray(0, take), msg.prefix.length);
      msg.prefix = prefix;
      const propsLength = readVarint(prefix, 0);
      if (propsLength) {
        if (propsLength[0] > MAX_PROPERTIES_SIZE) {
          throw new BLIPProtocolError(`property block of ${propsLength[0]} bytes exceeds ${MAX_PROPERTIES_SIZE}`);
        }
        msg.bodyStart = propsLength[1] + propsLength[0];
        msg.prefix = null;
      }
    }
    if (msg.bodyStart >= 0 && msg.length - msg.bodyStart > this.maxMessageSize) {
      throw new BLIPProtocolError(`${TYPE_NAMES[type]} #${number} is larger than the ${this.maxMessageSize}-byte limit`, CLOSE_TOO_BIG);
    }

    // Flow control: count wire bytes after the header (compressed size + CRC), ACK every 50 000.
    const frameBytes = wireBody.length + 4;
    msg.wireBytes += frameBytes;
    msg.unackedBytes += frameBytes;
    if (!(flags & FLAG_MORE)) {
      this.partial.delete(key);
      this.partialBytes -= msg.length;
      const [propertyList, body] = decodeMessageData(concatBytes(msg.chunks, msg.length));
      return {
        message: {
          number, type: TYPE_NAMES[type], urgent: !!(msg.flags & FLAG_URGENT), noReply: !!(msg.flags & FLAG_NOREPLY),
          compressed: msg.compressed, propertyList, body, frames: msg.frames,
        },
      };
    }
    if (msg.unackedBytes >= ACK_INTERVAL && this.sendAck) {
      msg.unackedBytes = 0;
      this.sendAck(type === TYPE_MSG ? TYPE_ACKMSG : TYPE_ACKRPY, number, msg.wireBytes);
    }
    return null;
  }
}

function hex32(n) {
  return n.toString(16).padStart(8, '0');
}

async function sha256Hex(bytes) {
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', bytes));
  return Array.from(digest, (b) => b.toString(16).padStart(2, '0')).join('');
}

/**
 * Decodes the captured frames of one direction of a BLIP 3 connection, in order, with the same
 * decoder the connection uses (running CRC, one inflate stream, multi-frame assembly).
 * @param {Uint8Array[]} frames one WebSocket message each
 * @returns {Promise<{messages: Array<object>, acks: Array<{type:string, number:number, bytes:number}>}>}
 *   messages in the order they complete, each `{ number, type, urgent, noReply, compressed,
 *   properties: [[k, v]...], bodyLength, bodySHA256, frames }`
 * @throws {BLIPProtocolError} naming the index of the first bad frame
 */
export async function decodeCapturedFrames(frames) {
  const receiver = new FrameReceiver({ maxMessageSize: DEFAULT_MAX_MESSAGE });
  const messages = [];
  const acks = [];
  for (let index = 0; index < frames.length; index++) {
    let event;
    try {
      event = receiver.receive(toUint8Array(frames[index]));
    } catch (e) {
      const err = new BLIPProtocolError(`frame ${index}: ${e.message}`, e.closeCode);
      err.frameIndex = index;
      throw err;
    }
    if (event && event.ack) acks.push(event.ack);
    if (event && event.message) {
      const m = event.message;
      messages.push({
        number: m.number, type: m.type, urgent: m.urgent, noReply: m.noReply, compressed: m.compressed,
        properties: m.propertyList, bodyLength: m.body.length, bodySHA256: await sha256Hex(m.body), frames: m.frames,
      });
    }
  }
  return { messages, acks };
}

function toUint8Array(data) {
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  throw new TypeError('expected bytes');
}

/** A body as bytes of our own: the caller may change or detach its buffer while we still send. */
async function bodyToBytes(body) {
  if (body === undefined || body === null) return new Uint8Array(0);
  if (typeof body === 'string') return utf8Encoder.encode(body);
  if (typeof Blob !== 'undefined' && body instanceof Blob) return new Uint8Array(await body.arrayBuffer());
  return toUint8Array(body).slice();
}

/** `value` as an integer in [min, max], or `fallback` when it is not a number. */
function clampedInteger(value, fallback, min, max) {
  const n = Math.floor(Number(value));
  if (value === undefined || value === null || Number.isNaN(n)) return fallback;
  return Math.min(max, Math.max(min, n));
}

// ---------------------------------------------------------------------------------------------
// Sending

/** One message we are sending: its encoded property block and body, read as one byte run. */
class OutgoingMessage {
  constructor({ type, number = 0, urgent, noReply, head, body, onSent = null }) {
    this.type = type;
    this.number = number; // requests get theirs when their first frame leaves (digest §7.4)
    this.urgent = urgent;
    this.noReply = noReply;
    this.head = head;
    this.body = body;
    this.length = head.length + body.length;
    this.offset = 0; // message bytes already framed
    this.bytesSent = 0; // wire bytes after the header (data + CRC), what ACKs count
    this.bytesAcked = 0;
    this.onSent = onSent; // called when the last frame is handed to the socket
  }

  get key() {
    return (this.type === TYPE_MSG ? 'M' : 'R') + this.number;
  }

  /** Copies the next `count` message bytes into `target` at `at`. */
  copyData(target, at, count) {
    let from = this.offset;
    const end = from + count;
    if (from < this.head.length) {
      const n = Math.min(end, this.head.length) - from;
      target.set(this.head.subarray(from, from + n), at);
      at += n;
      from += n;
    }
    if (from < end) target.set(this.body.subarray(from - this.head.length, end - this.head.length), at);
  }
}

// ---------------------------------------------------------------------------------------------
// The connection

/**
 * A BLIP 3 connection over a browser WebSocket.
 *
 * Create one with {@link BLIPConnection.connect}; send requests with {@link BLIPConnection#sendRequest};
 * answer the peer's requests with {@link BLIPConnection#handle}.
 */
export class BLIPConnection {
  /**
   * Opens a WebSocket to `url` and resolves once it is open.
   * @param {string} url ws:// or wss:// URL
   * @param {object} [options]
   * @param {string[]} [options.protocols] subprotocols offered, most preferred first
   * @param {number} [options.maxIncomingMessageSize=67108864] largest body accepted (inclusive); a bigger one
   *   is a protocol error (close code 1009)
   * @param {number} [options.frameSize=16384] bytes per frame (header + data + CRC), clamped to
   *   64..65536; 1/4 of it while an urgent message waits behind the one being sent
   * @param {number} [options.maxIncomingMessagesInProgress=1024] most messages the peer may have
   *   started and we not yet handled (partly received, or requests waiting for a handler); one more
   *   closes the connection as a policy violation (1008, 4008 on the wire)
   * @param {number} [options.incomingBufferBudget=134217728] most bytes those messages may hold;
   *   more closes with 1009. Keep it above maxIncomingMessageSize.
   * @param {number} [options.maxConcurrentHandlers=512] handlers running at once; later requests wait
   *   in arrival order. A handler's slot is free again once its reply is sent.
   * @param {number} [options.sendBufferLimit=1048576] stop handing frames to the socket while its
   *   bufferedAmount exceeds this
   * @param {string} [options.sessionToken] a one-time session token, offered as the subprotocol entry
   *   `SyncGatewaySession_<token>` beside the BLIP ones (how a browser authenticates to Sync Gateway
   *   3.3+ and to servers built on swift-blip; the server never echoes it back)
   * @param {number} [options.keepAliveInterval=0] milliseconds without anything received after which a
   *   `PING` request is sent (0: none); with no reply within `keepAliveTimeout` the connection closes
   *   with 3008
   * @param {number} [options.keepAliveTimeout] milliseconds a keepalive `PING` may wait for its reply
   *   (default: the interval)
   * @returns {Promise<BLIPConnection>} rejects with BLIPConnectionClosedError if the socket fails first
   */
  static connect(url, options = {}) {
    return new Promise((resolve, reject) => {
      let ws;
      try {
        const protocols = [...(options.protocols || DEFAULT_PROTOCOLS)];
        if (options.sessionToken) protocols.push(SESSION_TOKEN_PREFIX + options.sessionToken);
        ws = new WebSocket(url, protocols);
      } catch (e) {
        reject(new BLIPConnectionClosedError(1006, String(e && e.message || e), e));
        return;
      }
      ws.binaryType = 'arraybuffer';
      const onOpen = () => {
        ws.removeEventListener('close', onEarlyClose);
        resolve(new BLIPConnection(ws, options));
      };
      const onEarlyClose = (event) => {
        ws.removeEventListener('open', onOpen);
        reject(new BLIPConnectionClosedError(event.code, event.reason || 'connection failed'));
      };
      ws.addEventListener('open', onOpen, { once: true });
      ws.addEventListener('close', onEarlyClose, { once: true });
    });
  }

  /** @internal Use BLIPConnection.connect. */
  constructor(ws, options = {}) {
    this._ws = ws;
    this._frameSize = clampedInteger(options.frameSize || undefined, DEFAULT_FRAME_SIZE, MIN_FRAME_SIZE, MAX_FRAME_SIZE);
    this._smallFrameSize = Math.max(MIN_FRAME_SIZE, Math.floor(this._frameSize / 4));
    this._maxIncoming = options.maxIncomingMessageSize ?? DEFAULT_MAX_MESSAGE;
    this._sendBufferLimit = options.sendBufferLimit ?? DEFAULT_SEND_BUFFER_LIMIT;
    this._maxHandlers = clampedInteger(options.maxConcurrentHandlers, DEFAULT_MAX_HANDLERS, 1, Number.MAX_SAFE_INTEGER);
    this._runningHandlers = 0;
    this._waitingRequests = []; // requests waiting for a handler slot, in arrival order

    this._handlers = new Map();
    this._outbox = []; // messages with frames to send, head first
    this._sending = new Map(); // key → message being sent (in the out-box or paused), for ACKs
    this._paused = new Set(); // the "icebox": waiting for ACKs
    this._pendingReplies = new Map(); // our request number → { resolve, reject }
    this._lastRequestNumber = 0;
    this._sendCRC = 0;
    this._pumpScheduled = false;
    this._pumpTimer = null;
    this._state = 'open'; // 'open' → 'closing' (local close() called) → 'closed'
    this._localClose = null;
    this._closeTimer = null;

    this._stats = {
      messagesSent: 0, messagesReceived: 0, requestsSent: 0, repliesReceived: 0, requestsReceived: 0,
      framesSent: 0, framesReceived: 0, bytesSent: 0, bytesReceived: 0,
      acksSent: 0, acksReceived: 0, compressedFramesReceived: 0, maxUnacknowledgedBytes: 0, pausedMessages: 0,
    };

    this._receiver = new FrameReceiver({
      maxMessageSize: this._maxIncoming,
      maxInProgress: clampedInteger(options.maxIncomingMessagesInProgress, DEFAULT_MAX_IN_PROGRESS, 1, Number.MAX_SAFE_INTEGER),
      budget: clampedInteger(options.incomingBufferBudget, DEFAULT_INCOMING_BUDGET, 1, Number.MAX_SAFE_INTEGER),
      isAwaitedReply: (n) => this._pendingReplies.has(n),
      sendAck: (type, number, bytes) => this._sendAck(type, number, bytes),
    });

    this._closedResolve = null;
    /** @type {Promise<{code:number, reason:string, wasClean:boolean}>} settles however the connection ends */
    this.closed = new Promise((resolve) => (this._closedResolve = resolve));

    ws.addEventListener('message', (event) => this._onMessage(event));
    ws.addEventListener('close', (event) => this._onSocketClose(event));
    ws.addEventListener('error', () => {}); // a 'close' event always follows

    this._lastReceived = performance.now();
    this._keepAliveTimer = null;
    const interval = Math.max(0, Number(options.keepAliveInterval) || 0);
    if (interval > 0) {
      const timeout = Math.max(1, Number(options.keepAliveTimeout) || interval);
      this._keepAliveTimer = setInterval(() => this._keepAlive(interval, timeout), Math.max(10, interval / 4));
    }
  }

  /**
   * Sends a `PING` request (the keepalive of Couchbase Lite for JavaScript; Sync Gateway and swift-blip
   * servers answer it with an empty reply).
   * @returns {Promise<number>} the round trip in milliseconds
   */
  async ping() {
    const start = performance.now();
    await this.sendRequest({ profile: 'PING' });
    return performance.now() - start;
  }

  /** A keepalive tick: a PING after `interval` of silence; a close if one waits longer than `timeout`. */
  _keepAlive(interval, timeout) {
    if (this._state !== 'open') return;
    const now = performance.now();
    if (this._pingSentAt !== undefined) {
      if (now - this._pingSentAt > timeout) {
        this._pingSentAt = undefined;
        this.close(CLOSE_KEEPALIVE_TIMEOUT, 'keepalive PING not answered');
      }
      return;
    }
    if (now - this._lastReceived < interval) return;
    this._pingSentAt = now;
    this._stats.keepAlivePings = (this._stats.keepAlivePings || 0) + 1;
    this.sendRequest({ profile: 'PING' }).then(
      () => { this._pingSentAt = undefined; },
      () => {}, // the connection ended: its close says why
    );
  }

  /** @returns {'open'|'closing'|'closed'} 'closing' once close() was called, until the socket is closed */
  get state() {
    return this._state;
  }

  /** @returns {string} the subprotocol the server chose */
  get subprotocol() {
    return this._ws.protocol;
  }

  /**
   * @returns {{messagesSent:number, messagesReceived:number, framesSent:number, framesReceived:number,
   *   bytesSent:number, bytesReceived:number, acksSent:number, acksReceived:number,
   *   compressedFramesReceived:number, maxUnacknowledgedBytes:number}} a snapshot of counters
   *   (bytes are whole WebSocket messages; maxUnacknowledgedBytes is the most bytes of one of our
   *   messages the peer had not ACKed right after one of its frames was sent)
   */
  get statistics() {
    return { ...this._stats, flowControlWindow: MAX_UNACKED };
  }

  /**
   * Registers the handler for requests the peer sends with this `Profile`.
   * The handler returns `undefined` (empty reply) or `{ properties, body }`; throwing a BLIPError
   * sends that ERR (BLIP 500 if it cannot be encoded), anything else thrown sends ERR BLIP 500.
   * No handler → ERR BLIP 404. At most `maxConcurrentHandlers` run at once; later requests wait.
   * @param {string} profile
   * @param {(request: BLIPMessage) => any} handler may be async; `null` removes it
   */
  handle(profile, handler) {
    if (handler) this._handlers.set(profile, handler);
    else this._handlers.delete(profile);
  }

  /**
   * Sends a request.
   * @param {object} request
   * @param {string} [request.profile] goes in the `Profile` property
   * @param {Object<string,string>} [request.properties]
   * @param {string|Uint8Array|ArrayBuffer|Blob} [request.body]
   * @param {boolean} [request.urgent=false]
   * @param {boolean} [request.noReply=false]
   * @returns {Promise<BLIPMessage|undefined>} the RPY; rejects with BLIPError for an ERR, or
   *   BLIPConnectionClosedError. With noReply, resolves undefined once the last frame is handed to the socket.
   */
  async sendRequest({ profile, properties = {}, body, urgent = false, noReply = false } = {}) {
    this._throwIfClosed();
    const pairs = [];
    if (profile !== undefined) pairs.push(['Profile', String(profile)]);
    for (const [k, v] of Object.entries(properties)) {
      if (k === 'Profile' && profile !== undefined) continue;
      pairs.push([k, String(v)]);
    }
    const head = encodeProperties(pairs);
    const bytes = await bodyToBytes(body);
    this._throwIfClosed(); // reading a Blob takes time
    return new Promise((resolve, reject) => {
      const msg = new OutgoingMessage({ type: TYPE_MSG, urgent, noReply, head, body: bytes });
      msg.reject = reject;
      if (noReply) msg.onSent = () => resolve(undefined);
      else msg.replyHandlers = { resolve, reject };
      this._enqueue(msg, true);
    });
  }

  /**
   * Closes the connection. Pending requests reject with BLIPConnectionClosedError; later sends
   * reject at once.
   * @param {number} [code=1000] 1000 or 3000-4999 (what browsers allow)
   * @param {string} [reason='']
   * @returns {Promise<{code:number, reason:string, wasClean:boolean}>} the same as `closed`
   */
  close(code = 1000, reason = '') {
    if (this._state === 'open') {
      this._state = 'closing';
      this._localClose = { code, reason };
      this._closeSocket(code, reason);
      // If the peer never completes the closing handshake, end anyway.
      this._closeTimer = setTimeout(() => this._shutdown(code, reason, false), 10000);
    }
    return this.closed;
  }

  // --- internals: sending ---

  _throwIfClosed() {
    if (this._state !== 'open') {
      const info = this._closeInfo || this._localClose || { code: 1000, reason: '' };
      throw new BLIPConnectionClosedError(info.code, info.reason);
    }
  }

  _enqueue(msg, isNew) {
    this._insertIntoOutbox(msg, isNew);
    this._schedulePump();
  }

  /** Out-box insertion, digest §7.9 (LiteCore's variant: index 0 is scanned; "new" = nothing sent). */
  _insertIntoOutbox(msg, isNew) {
    const box = this._outbox;
    if (!msg.urgent || box.length < 2) {
      box.push(msg);
      return;
    }
    let index = 1; // reached the head without stopping: right behind it
    for (let i = box.length - 1; i >= 0; i--) {
      const other = box[i];
      if (other.urgent) {
        index = Math.min(i + 2, box.length); // leave one message between two urgent ones
        break;
      }
      if (isNew && other.bytesSent === 0) {
        index = i + 1; // keep message starts in order
        break;
      }
    }
    box.splice(index, 0, msg);
  }

  _schedulePump() {
    if (this._pumpScheduled || this._pumpTimer !== null) return;
    this._pumpScheduled = true;
    queueMicrotask(() => {
      this._pumpScheduled = false;
      this._pump();
    });
  }

  /** Sends frames until the out-box is empty or the socket holds enough. */
  _pump() {
    while (this._outbox.length > 0 && this._state !== 'closed') {
      if (this._ws.readyState !== 1) return; // closing: the close event cleans up
      if (this._ws.bufferedAmount > this._sendBufferLimit) {
        // Browsers have no drain event: poll.
        this._pumpTimer = setTimeout(() => {
          this._pumpTimer = null;
          this._pump();
        }, 1);
        return;
      }
      const msg = this._outbox.shift();
      const next = this._outbox[0];
      const budget = msg.urgent || !next || !next.urgent ? this._frameSize : this._smallFrameSize;
      try {
        this._sendFrame(msg, budget);
      } catch (e) {
        // The message is off the out-box: put it back so _shutdown rejects its promise (it skips
        // a promise already rejected), and end the connection rather than leave it wedged.
        if (!this._outbox.includes(msg) && !this._paused.has(msg)) this._outbox.unshift(msg);
        this._failConnection(e instanceof BLIPProtocolError ? e : internalError(e));
        return;
      }
    }
  }

  _sendFrame(msg, budget) {
    if (msg.type === TYPE_MSG && msg.number === 0) {
      if (this._lastRequestNumber >= MAX_REQUEST_NUMBER) throw new BLIPProtocolError('out of request numbers');
      msg.number = ++this._lastRequestNumber;
      this._sending.set(msg.key, msg);
      // Registered before the first frame leaves, so no reply can arrive unmatched (sync_gateway#3221).
      if (msg.replyHandlers) this._pendingReplies.set(msg.number, msg.replyHandlers);
      this._stats.requestsSent++;
    } else if (msg.offset === 0) {
      this._sending.set(msg.key, msg);
    }
    let flags = msg.type;
    if (msg.urgent) flags |= FLAG_URGENT;
    if (msg.noReply) flags |= FLAG_NOREPLY;
    const headerLength = varintLength(msg.number) + 1;
    const room = Math.max(1, budget - headerLength - 4);
    const remaining = msg.length - msg.offset;
    const count = Math.min(room, remaining);
    const more = count < remaining;
    if (more) flags |= FLAG_MORE;

    const frame = new Uint8Array(headerLength + count + 4);
    let at = writeVarint(frame, 0, msg.number);
    frame[at++] = flags;
    msg.copyData(frame, at, count);
    this._sendCRC = crc32(frame.subarray(at, at + count), this._sendCRC);
    at += count;
    frame[at++] = this._sendCRC >>> 24;
    frame[at++] = (this._sendCRC >>> 16) & 0xff;
    frame[at++] = (this._sendCRC >>> 8) & 0xff;
    frame[at++] = this._sendCRC & 0xff;
    msg.offset += count;
    msg.bytesSent += count + 4;

    this._ws.send(frame);
    this._stats.framesSent++;
    this._stats.bytesSent += frame.length;
    const unacked = msg.bytesSent - msg.bytesAcked;
    if (unacked > this._stats.maxUnacknowledgedBytes) this._stats.maxUnacknowledgedBytes = unacked;

    if (more) {
      if (this._mustWaitForAck(msg)) {
        this._paused.add(msg);
        this._stats.pausedMessages++;
      } else {
        this._insertIntoOutbox(msg, false);
      }
    } else {
      this._sending.delete(msg.key);
      this._stats.messagesSent++;
      if (msg.onSent) msg.onSent();
    }
  }

  /** True if sending one more full frame would leave more than the window unacknowledged. */
  _mustWaitForAck(msg) {
    const unacked = msg.bytesSent - msg.bytesAcked;
    if (unacked <= 0) return false; // no ACK could ever come to release it
    const nextFrameBytes = Math.min(msg.length - msg.offset, this._frameSize) + 4;
    return unacked + nextFrameBytes > MAX_UNACKED;
  }

  _sendAck(type, number, bytes) {
    if (this._ws.readyState !== 1) return;
    // ACKs go straight to the socket (as go-blip does): they are tiny and must not wait behind data.
    const frame = new Uint8Array(varintLength(number) + 1 + varintLength(bytes));
    let at = writeVarint(frame, 0, number);
    frame[at++] = type | FLAG_URGENT | FLAG_NOREPLY; // 0x34 / 0x35, as LiteCore and go-blip send
    writeVarint(frame, at, bytes);
    this._ws.send(frame);
    this._stats.acksSent++;
    this._stats.bytesSent += frame.length;
  }

  _receivedAck(ack) {
    this._stats.acksReceived++;
    const key = (ack.type === 'ACKMSG' ? 'M' : 'R') + ack.number;
    const msg = this._sending.get(key);
    if (!msg || ack.bytes > msg.bytesSent || ack.bytes <= msg.bytesAcked) return; // stale or bogus: ignore
    msg.bytesAcked = ack.bytes;
    if (this._paused.has(msg) && !this._mustWaitForAck(msg)) {
      this._paused.delete(msg);
      this._enqueue(msg, false);
    }
  }

  // --- internals: receiving ---

  _onMessage(event) {
    if (this._state === 'closed') return;
    this._lastReceived = performance.now();
    if (typeof event.data === 'string') {
      // Not BLIP: go-blip would misparse it, the spec calls it fatal (digest §7.1).
      this._failConnection(new BLIPProtocolError('text WebSocket message', 1003));
      return;
    }
    const frame = new Uint8Array(event.data);
    this._stats.framesReceived++;
    this._stats.bytesReceived += frame.length;
    let result;
    try {
      result = this._receiver.receive(frame);
    } catch (e) {
      this._failConnection(e instanceof BLIPProtocolError ? e : new BLIPProtocolError(String(e && e.message || e)));
      return;
    }
    this._stats.compressedFramesReceived = this._receiver.compressedFrames;
    if (!result) return;
    if (result.ack) {
      this._receivedAck(result.ack);
      return;
    }
    const message = new BLIPMessage(result.message);
    this._stats.messagesReceived++;
    if (message.type === 'MSG') {
      this._stats.requestsReceived++;
      this._dispatchRequest(message);
    } else {
      this._stats.repliesReceived++;
      const waiter = this._pendingReplies.get(message.number);
      this._pendingReplies.delete(message.number);
      if (!waiter) return;
      if (message.type === 'RPY') {
        waiter.resolve(message);
      } else {
        const code = Number.parseInt(message.properties['Error-Code'] ?? '', 10);
        waiter.reject(new BLIPError(message.properties['Error-Domain'] || 'BLIP', Number.isNaN(code) ? 0 : code,
          message.text(), message.properties));
      }
    }
  }

  /** Runs the request's handler now if a slot is free, else queues it (the receiver counts it). */
  _dispatchRequest(request) {
    if (this._runningHandlers < this._maxHandlers) {
      this._startHandler(request);
      return;
    }
    this._waitingRequests.push(request);
    this._receiver.queuedMessages++;
    this._receiver.queuedBytes += request.body.length;
  }

  _startHandler(request) {
    this._runningHandlers++;
    this._runHandler(request).catch((e) => this._failConnection(internalError(e)));
  }

  /** Frees a handler slot and gives it to the request that has waited longest. */
  _handlerDone() {
    this._runningHandlers--;
    if (this._state !== 'open' || this._waitingRequests.length === 0) return;
    const next = this._waitingRequests.shift();
    this._receiver.queuedMessages--;
    this._receiver.queuedBytes -= next.body.length;
    this._startHandler(next);
  }

  /** Calls the handler and queues its reply; the slot is freed once the reply is sent. */
  async _runHandler(request) {
    let reply;
    try {
      reply = await this._buildReply(request);
    } catch (e) {
      this._handlerDone();
      throw e;
    }
    if (!reply || this._state !== 'open') {
      this._handlerDone();
      return;
    }
    this._enqueue(new OutgoingMessage({
      type: reply.type, number: request.number, urgent: request.urgent, noReply: false, head: reply.head, body: reply.body,
      onSent: () => this._handlerDone(),
    }), true);
  }

  /** The RPY or ERR for a request, or null for a no-reply request. Never throws for the handler's sake. */
  async _buildReply(request) {
    const handler = this._handlers.get(request.profile);
    try {
      if (!handler) throw new BLIPError('BLIP', 404, `no handler for profile "${request.profile ?? ''}"`);
      const result = await handler(request);
      if (request.noReply) return null;
      const pairs = Object.entries(result?.properties ?? {}).map(([k, v]) => [k, String(v)]);
      return { type: TYPE_RPY, head: encodeProperties(pairs), body: await bodyToBytes(result?.body) };
    } catch (e) {
      if (request.noReply) return null;
      return errorReply(e);
    }
  }

  // --- internals: closing ---

  _closeSocket(code, reason) {
    const shortReason = truncateReason(reason); // once: the fallbacks below reuse it
    try {
      this._ws.close(code, shortReason);
    } catch {
      // Browsers refuse codes outside 1000 and 3000-4999: use the same code in the private range.
      try {
        this._ws.close(code >= 1000 && code < 2000 ? code + 3000 : 1000, shortReason);
      } catch {
        this._ws.close();
      }
    }
  }

  _failConnection(error) {
    if (this._state === 'closed') return;
    const code = error.closeCode || CLOSE_PROTOCOL_ERROR;
    this._closeSocket(code, error.message);
    this._shutdown(code, error.message, false, error);
  }

  _onSocketClose(event) {
    let code = event.code;
    let reason = event.reason;
    if (this._localClose) {
      // Our own close: report what we asked for where the peer's answer says nothing.
      if (code === 1005 || code === 1006) code = this._localClose.code;
      reason = reason || this._localClose.reason;
    }
    this._shutdown(code, reason, event.wasClean);
  }

  /** Ends everything exactly once: pending requests, queued messages, the `closed` promise. */
  _shutdown(code, reason, wasClean, cause = undefined) {
    if (this._state === 'closed') return;
    this._state = 'closed';
    this._closeInfo = { code, reason };
    if (this._pumpTimer !== null) clearTimeout(this._pumpTimer);
    this._pumpTimer = null;
    if (this._closeTimer) clearTimeout(this._closeTimer);
    if (this._keepAliveTimer !== null) clearInterval(this._keepAliveTimer);
    this._keepAliveTimer = null;
    const failed = new Set();
    const fail = (reject) => {
      if (!reject || failed.has(reject)) return;
      failed.add(reject);
      reject(new BLIPConnectionClosedError(code, reason, cause));
    };
    for (const waiter of this._pendingReplies.values()) fail(waiter.reject);
    for (const msg of [...this._outbox, ...this._paused]) fail(msg.reject);
    this._pendingReplies.clear();
    this._outbox.length = 0;
    this._paused.clear();
    this._sending.clear();
    this._waitingRequests.length = 0; // nobody is left to answer
    this._closedResolve({ code, reason, wasClean: !!wasClean });
  }
}

/** Browsers refuse close reasons over 123 UTF-8 bytes. */
function truncateReason(reason) {
  // 123 UTF-16 units encode to at least 123 bytes, so longer input is never needed; a surrogate
  // pair split here becomes U+FFFD at the very end, which the cut below removes.
  const s = String(reason ?? '').slice(0, 123);
  const bytes = utf8Encoder.encode(s);
  if (bytes.length <= 123) return s;
  let end = 123;
  while (end > 0 && (bytes[end] & 0xc0) === 0x80) end--; // back to the start of a character
  return utf8Decoder.decode(bytes.subarray(0, end));
}

/** Wraps an unexpected exception of ours so that _failConnection closes with 1011 (4011 on the wire). */
function internalError(e) {
  const error = new Error(`internal error: ${e && e.message || e}`);
  error.closeCode = CLOSE_INTERNAL_ERROR;
  error.cause = e;
  return error;
}

/**
 * The ERR reply for what a handler threw. A BLIPError is sent as it is if it can be encoded
 * (no NUL, properties within 100 KiB); otherwise, and for anything else, BLIP 500 — the peer
 * must get some reply.
 */
function errorReply(e) {
  let message;
  try {
    message = String(e && e.message || e);
  } catch {
    message = 'handler failed'; // e.g. a thrown object whose toString throws
  }
  if (e instanceof BLIPError) {
    try {
      const pairs = [['Error-Domain', String(e.domain)], ['Error-Code', String(e.code)]];
      for (const [k, v] of Object.entries(e.properties ?? {})) {
        if (k !== 'Error-Domain' && k !== 'Error-Code') pairs.push([k, String(v)]);
      }
      return { type: TYPE_ERR, head: encodeProperties(pairs), body: utf8Encoder.encode(message) };
    } catch {
      // fall through to the plain ERR
    }
  }
  return {
    type: TYPE_ERR, head: encodeProperties([['Error-Domain', 'BLIP'], ['Error-Code', '500']]), body: utf8Encoder.encode(message),
  };
}
