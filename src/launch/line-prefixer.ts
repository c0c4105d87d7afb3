// Prefixes every line of a rank's output with "[rank R] ".
import { Transform, type TransformCallback } from 'node:stream';

const NEWLINE = 0x0a;

/**
 * Emits whole lines only, so that one rank's line never lands in the middle of another's when
 * several ranks share a terminal. Works on bytes, not strings, so a UTF-8 character split across
 * reads stays intact. A partial last line is completed with a newline at the end of the stream; a
 * line longer than `maxLineBytes` (a progress bar redrawn with \r) is broken rather than buffered
 * without bound.
 */
export class LinePrefixer extends Transform {
  #prefix: Buffer;
  #maxLineBytes: number;
  #partial: Buffer[] = [];
  #partialBytes = 0;

  constructor(prefix: string, maxLineBytes = 64 * 1024) {
    super();
    this.#prefix = Buffer.from(prefix, 'utf8');
    this.#maxLineBytes = maxLineBytes;
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    const out: Buffer[] = [];
    let start = 0;
    for (let end = chunk.indexOf(NEWLINE); end >= 0; end = chunk.indexOf(NEWLINE, start)) {
      out.push(this.#prefix, ...this.#partial, chunk.subarray(start, end + 1));
      this.#partial = [];
      this.#partialBytes = 0;
      start = end + 1;
    }
    if (start < chunk.length) {
      this.#partial.push(chunk.subarray(start));
      this.#partialBytes += chunk.length - start;
      if (this.#partialBytes > this.#maxLineBytes) this.#completePartial(out);
    }
    if (out.length > 0) this.push(Buffer.concat(out));
    callback();
  }

  override _flush(callback: TransformCallback): void {
    const out: Buffer[] = [];
    this.#completePartial(out);
    if (out.length > 0) this.push(Buffer.concat(out));
    callback();
  }

  #completePartial(out: Buffer[]): void {
    if (this.#partialBytes === 0) return;
    out.push(this.#prefix, ...this.#partial, Buffer.of(NEWLINE));
    this.#partial = [];
    this.#partialBytes = 0;
  }
}
