// Type declarations for blip.js, the browser BLIP 3 client (served at /_blip/blip.js).

/** Options for {@link BLIPConnection.connect}. */
export interface BLIPConnectOptions {
  /** Subprotocols offered, most preferred first. Default `['BLIP_3+CBMobile_3', 'BLIP_3+CBMobile_2']`. */
  protocols?: string[];
  /** Largest incoming message body accepted, inclusive (default 67108864 = 64 MiB). Bigger closes with 1009. */
  maxIncomingMessageSize?: number;
  /**
   * Bytes per outgoing frame, header and CRC included (default 16384, clamped to 64..65536); a quarter
   * of it while an urgent message waits.
   */
  frameSize?: number;
  /** Frames are held back while the socket's `bufferedAmount` exceeds this (default 1048576). */
  sendBufferLimit?: number;
  /**
   * Most messages the peer may have started that are not yet handled: partly received ones plus
   * requests waiting for a handler (default 1024). One more closes the connection with 1008
   * (4008 on the wire).
   */
  maxIncomingMessagesInProgress?: number;
  /**
   * Most bytes those messages may hold together (default 134217728 = 128 MiB). More closes with 1009
   * (4009 on the wire). Keep it above `maxIncomingMessageSize`.
   */
  incomingBufferBudget?: number;
  /**
   * Handlers running at once (default 512). Later requests wait in arrival order; a slot is free
   * again once the handler's reply has been sent.
   */
  maxConcurrentHandlers?: number;
  /**
   * A one-time session token, offered as the subprotocol entry `SyncGatewaySession_<token>` beside the
   * BLIP ones: how a browser authenticates to Sync Gateway 3.3+ (it cannot set `Authorization`). The
   * server never echoes it back.
   */
  sessionToken?: string;
  /**
   * Milliseconds without anything received after which a `PING` request is sent (default 0: never).
   * With no reply within `keepAliveTimeout`, the connection closes with 3008.
   */
  keepAliveInterval?: number;
  /** Milliseconds a keepalive `PING` may wait for its reply (default: `keepAliveInterval`). */
  keepAliveTimeout?: number;
}

/** A request body: a string is sent as UTF-8. */
export type BLIPBody = string | Uint8Array | ArrayBuffer | ArrayBufferView | Blob;

/** What {@link BLIPConnection.sendRequest} takes. */
export interface BLIPRequestOptions {
  /** Sent as the `Profile` property. */
  profile?: string;
  properties?: Record<string, string | number | boolean>;
  body?: BLIPBody;
  urgent?: boolean;
  /** The peer sends no reply; the promise resolves once the last frame is handed to the socket. */
  noReply?: boolean;
}

/** What a handler may return: `undefined` for an empty reply. */
export interface BLIPReply {
  properties?: Record<string, string | number | boolean>;
  body?: BLIPBody;
}

/** How a connection ended. */
export interface BLIPCloseInfo {
  code: number;
  reason: string;
  wasClean: boolean;
}

/** Counters of one connection (a snapshot). */
export interface BLIPStatistics {
  messagesSent: number;
  messagesReceived: number;
  requestsSent: number;
  repliesReceived: number;
  requestsReceived: number;
  framesSent: number;
  framesReceived: number;
  /** Whole WebSocket messages, ACKs included. */
  bytesSent: number;
  bytesReceived: number;
  acksSent: number;
  acksReceived: number;
  compressedFramesReceived: number;
  /** The most bytes of one outgoing message the peer had not ACKed, right after one of its frames was sent. */
  maxUnacknowledgedBytes: number;
  /** How often a message of ours paused to wait for ACKs. */
  pausedMessages: number;
  /** The flow-control window (128000): maxUnacknowledgedBytes never exceeds it. */
  flowControlWindow: number;
}

/** A BLIP 3 connection over a browser WebSocket. Outgoing frames are never compressed. */
export class BLIPConnection {
  /** Opens the WebSocket; rejects with BLIPConnectionClosedError if it closes or fails before opening. */
  static connect(url: string | URL, options?: BLIPConnectOptions): Promise<BLIPConnection>;
  private constructor();
  /** The subprotocol the server chose. */
  readonly subprotocol: string;
  /** 'closing' once close() was called, 'closed' once the connection has ended. */
  readonly state: 'open' | 'closing' | 'closed';
  readonly statistics: BLIPStatistics;
  /** Settles (never rejects) however the connection ends. */
  readonly closed: Promise<BLIPCloseInfo>;
  /** Sends a request; a normal one resolves with the RPY and rejects with BLIPError for an ERR. */
  sendRequest(request: BLIPRequestOptions & { noReply: true }): Promise<undefined>;
  sendRequest(request: BLIPRequestOptions): Promise<BLIPMessage>;
  /**
   * Answers the peer's requests with this Profile. Throw a BLIPError to send that ERR (BLIP 500 if
   * it cannot be encoded: a NUL, or properties over 100 KiB); any other throw sends ERR BLIP 500. Requests without a handler get ERR BLIP 404. `null` removes the handler.
   */
  handle(profile: string, handler: ((request: BLIPMessage) => BLIPReply | undefined | void | Promise<BLIPReply | undefined | void>) | null): void;
  /** Closes (code 1000 or 3000-4999); pending requests reject with BLIPConnectionClosedError. */
  close(code?: number, reason?: string): Promise<BLIPCloseInfo>;
  /** Sends a `PING` request (answered with an empty reply); resolves with the round trip in milliseconds. */
  ping(): Promise<number>;
}

/** A received message: a request from the peer, or a reply to one of ours. */
export class BLIPMessage {
  private constructor();
  readonly number: number;
  readonly type: 'MSG' | 'RPY' | 'ERR';
  readonly properties: Record<string, string>;
  /** Properties in wire order. */
  readonly propertyList: Array<[string, string]>;
  /** The `Profile` property. */
  readonly profile: string | undefined;
  readonly body: Uint8Array;
  readonly urgent: boolean;
  readonly noReply: boolean;
  /** At least one frame arrived compressed. */
  readonly compressed: boolean;
  /** The body as UTF-8 text. */
  text(): string;
  /** The body parsed as JSON. */
  json(): any;
}

/** An ERR reply: from the peer, or thrown by a handler to send one. */
export class BLIPError extends Error {
  constructor(domain: string, code: number, message?: string, properties?: Record<string, string>);
  readonly domain: string;
  readonly code: number;
  readonly properties: Record<string, string>;
}

/** The connection closed before the operation completed. */
export class BLIPConnectionClosedError extends Error {
  constructor(code: number, reason?: string, cause?: unknown);
  readonly code: number;
  readonly reason: string;
  /** Set when we closed because of a protocol error: the BLIPProtocolError. */
  readonly cause?: unknown;
}

/**
 * The peer broke the protocol or a limit; the connection closes with 1002 (1009 for an oversized
 * message or buffer, 1008 for too many messages in progress).
 */
export class BLIPProtocolError extends Error {
  constructor(message: string, closeCode?: number);
  /** 1002, 1008, 1009 or 1003 (text message). On the wire a browser sends 4002 / 4008 / 4009 / 4003 instead. */
  readonly closeCode: number;
  /** Set by decodeCapturedFrames: the index of the bad frame. */
  frameIndex?: number;
}

/** CRC-32 (IEEE), continuing from `crc` like zlib's crc32(). */
export function crc32(bytes: Uint8Array, crc?: number): number;

/** Raw DEFLATE decoder keeping its 32 KiB window between calls; each input must end on a block boundary. */
export class RawInflater {
  constructor();
  /** Throws BLIPProtocolError on invalid data or when the output would exceed `maxOutput`. */
  inflate(input: Uint8Array, maxOutput?: number): Uint8Array;
}

/** One decoded message of a capture. */
export interface CapturedMessage {
  number: number;
  type: 'MSG' | 'RPY' | 'ERR';
  urgent: boolean;
  noReply: boolean;
  /** Any frame of the message was compressed. */
  compressed: boolean;
  properties: Array<[string, string]>;
  bodyLength: number;
  /** Lowercase hex. */
  bodySHA256: string;
  /** Number of frames. */
  frames: number;
}

/** One ACK frame of a capture. */
export interface CapturedAck {
  type: 'ACKMSG' | 'ACKRPY';
  number: number;
  bytes: number;
}

/** Decodes one direction's frames in order; throws BLIPProtocolError naming the bad frame's index. */
export function decodeCapturedFrames(frames: Uint8Array[]): Promise<{ messages: CapturedMessage[]; acks: CapturedAck[] }>;
