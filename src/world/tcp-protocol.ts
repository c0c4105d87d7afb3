// Wire format of the TCP rendezvous store, shared by server and client.
//
// Every message is a frame: u32 big-endian body length, then the body. The body starts with a u8
// opcode; requests and replies carry a u32 request id so one connection can have several calls in
// flight (a rank may wait on a key while it sets another). Layouts after the opcode:
//
//   AUTH     token bytes                                  (first frame of every connection)
//   SET      id u32 | keyLen u16 | key | value
//   GET      id u32 | timeoutMs u32 | keyLen u16 | key
//   ADD      id u32 | delta i64 | keyLen u16 | key
//   SET_ON_CLOSE  id u32 | keyLen u16 | key | value    (set by the server when this connection ends; answered OK)
//   DELETE   id u32 | keyLen u16 | key                    (removes the key if there; answered OK)
//   AUTH_OK  (empty)
//   OK       id u32
//   VALUE    id u32 | value
//   COUNTER  id u32 | value i64
//   TIMEOUT  id u32
//   ERROR    id u32 | utf-8 message
//
// Sizes are capped so a peer cannot make the other side buffer without bound; a frame over the cap,
// or one that does not parse, ends the connection.

export const MAX_KEY_BYTES = 4096;
export const MAX_VALUE_BYTES = 1 << 20;
/** Before authentication only a short AUTH frame is accepted. */
export const MAX_AUTH_FRAME = 1 + 256;
/** Largest body: a SET with the largest key and value. */
export const MAX_FRAME = 1 + 4 + 2 + MAX_KEY_BYTES + MAX_VALUE_BYTES;

export const Op = {
  AUTH: 0x01,
  SET: 0x02,
  GET: 0x03,
  ADD: 0x04,
  /** A SET the server makes when this connection ends (by close or by the client's death), not now. */
  SET_ON_CLOSE: 0x05,
  /** Removes a key no rank will read again (a finished gather's), so a long job's store does not grow. */
  DELETE: 0x06,
  AUTH_OK: 0x81,
  OK: 0x82,
  VALUE: 0x83,
  COUNTER: 0x84,
  TIMEOUT: 0x85,
  ERROR: 0x86,
} as const;

export type Request =
  | { op: typeof Op.SET | typeof Op.SET_ON_CLOSE; id: number; key: string; value: Buffer }
  | { op: typeof Op.GET; id: number; key: string; timeoutMs: number }
  | { op: typeof Op.ADD; id: number; key: string; delta: bigint }
  | { op: typeof Op.DELETE; id: number; key: string };

export type Reply =
  | { op: typeof Op.OK; id: number }
  | { op: typeof Op.VALUE; id: number; value: Buffer }
  | { op: typeof Op.COUNTER; id: number; value: bigint }
  | { op: typeof Op.TIMEOUT; id: number }
  | { op: typeof Op.ERROR; id: number; message: string };

/** A frame that does not follow the format above. */
export class ProtocolViolation extends Error {}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/** Splits a byte stream into frame bodies, refusing any body longer than `maxBody`. */
export class FrameReader {
  #chunks: Buffer[] = [];
  #buffered = 0;
  maxBody: number;

  constructor(maxBody: number) {
    this.maxBody = maxBody;
  }

  push(chunk: Buffer): void {
    this.#chunks.push(chunk);
    this.#buffered += chunk.length;
  }

  /**
   * The next complete body, or undefined until more bytes arrive. One at a time because the limit
   * may change between frames (it grows after authentication). Throws ProtocolViolation.
   */
  next(): Buffer | undefined {
    if (this.#buffered < 4) return undefined;
    const length = this.#peek(4).readUInt32BE(0);
    // Checked before buffering the body, so an oversized frame costs no memory.
    if (length === 0 || length > this.maxBody) throw new ProtocolViolation(`frame of ${length} bytes (limit ${this.maxBody})`);
    if (this.#buffered < 4 + length) return undefined;
    return this.#take(4 + length).subarray(4);
  }

  #peek(n: number): Buffer {
    if (this.#chunks[0]!.length < n) this.#chunks = [Buffer.concat(this.#chunks)];
    return this.#chunks[0]!;
  }

  #take(n: number): Buffer {
    const all = this.#chunks.length === 1 ? this.#chunks[0]! : Buffer.concat(this.#chunks);
    const rest = all.subarray(n);
    this.#chunks = rest.length > 0 ? [rest] : [];
    this.#buffered = rest.length;
    // Copy so a small frame does not pin a large receive buffer.
    return Buffer.from(all.subarray(0, n));
  }
}

function frame(body: Buffer): Buffer {
  const head = Buffer.allocUnsafe(4);
  head.writeUInt32BE(body.length, 0);
  return Buffer.concat([head, body]);
}

function keyBytes(key: string): Buffer {
  const bytes = Buffer.from(key, 'utf8');
  if (bytes.length === 0 || bytes.length > MAX_KEY_BYTES) throw new RangeError(`key of ${bytes.length} bytes`);
  return bytes;
}

export function encodeAuth(token: string): Buffer {
  return frame(Buffer.concat([Buffer.of(Op.AUTH), Buffer.from(token, 'utf8')]));
}

export function encodeAuthOk(): Buffer {
  return frame(Buffer.of(Op.AUTH_OK));
}

export function encodeRequest(req: Request): Buffer {
  const key = keyBytes(req.key);
  const sets = req.op === Op.SET || req.op === Op.SET_ON_CLOSE;
  const fixed = sets || req.op === Op.DELETE ? 7 : req.op === Op.GET ? 11 : 15;
  const head = Buffer.alloc(fixed);
  head.writeUInt8(req.op, 0);
  head.writeUInt32BE(req.id, 1);
  if (req.op === Op.GET) head.writeUInt32BE(req.timeoutMs, 5);
  if (req.op === Op.ADD) head.writeBigInt64BE(req.delta, 5);
  head.writeUInt16BE(key.length, fixed - 2);
  return frame(Buffer.concat(sets ? [head, key, (req as { value: Buffer }).value] : [head, key]));
}

export function encodeReply(reply: Reply): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt8(reply.op, 0);
  head.writeUInt32BE(reply.id, 1);
  switch (reply.op) {
    case Op.OK:
    case Op.TIMEOUT:
      return frame(head);
    case Op.VALUE:
      return frame(Buffer.concat([head, reply.value]));
    case Op.COUNTER: {
      const value = Buffer.alloc(8);
      value.writeBigInt64BE(reply.value, 0);
      return frame(Buffer.concat([head, value]));
    }
    case Op.ERROR:
      return frame(Buffer.concat([head, Buffer.from(reply.message, 'utf8')]));
  }
}

/** Parses a request body (after authentication). Throws ProtocolViolation. */
export function decodeRequest(body: Buffer): Request {
  const op = body[0];
  const fixed = op === Op.SET || op === Op.SET_ON_CLOSE || op === Op.DELETE ? 7 : op === Op.GET ? 11 : op === Op.ADD ? 15 : -1;
  if (fixed < 0) throw new ProtocolViolation(`unknown opcode ${op}`);
  if (body.length < fixed) throw new ProtocolViolation('truncated request');
  const id = body.readUInt32BE(1);
  const keyLength = body.readUInt16BE(fixed - 2);
  if (keyLength === 0 || keyLength > MAX_KEY_BYTES || body.length < fixed + keyLength) {
    throw new ProtocolViolation(`bad key length ${keyLength}`);
  }
  let key: string;
  try {
    key = strictUtf8.decode(body.subarray(fixed, fixed + keyLength));
  } catch {
    throw new ProtocolViolation('key is not UTF-8');
  }
  const rest = body.subarray(fixed + keyLength);
  if (op === Op.SET || op === Op.SET_ON_CLOSE) {
    if (rest.length > MAX_VALUE_BYTES) throw new ProtocolViolation(`value of ${rest.length} bytes`);
    return { op, id, key, value: rest };
  }
  if (rest.length !== 0) throw new ProtocolViolation('trailing bytes');
  if (op === Op.GET) return { op, id, key, timeoutMs: body.readUInt32BE(5) };
  if (op === Op.DELETE) return { op, id, key };
  return { op: Op.ADD, id, key, delta: body.readBigInt64BE(5) };
}

/** Parses a reply body. Throws ProtocolViolation. */
export function decodeReply(body: Buffer): Reply {
  const op = body[0];
  if (body.length < 5) throw new ProtocolViolation('truncated reply');
  const id = body.readUInt32BE(1);
  const rest = body.subarray(5);
  switch (op) {
    case Op.OK:
    case Op.TIMEOUT:
      if (rest.length !== 0) throw new ProtocolViolation('trailing bytes');
      return { op, id };
    case Op.VALUE:
      return { op, id, value: rest };
    case Op.COUNTER:
      if (rest.length !== 8) throw new ProtocolViolation('bad counter');
      return { op, id, value: rest.readBigInt64BE(0) };
    case Op.ERROR:
      return { op, id, message: rest.toString('utf8') };
    default:
      throw new ProtocolViolation(`unknown opcode ${op}`);
  }
}
