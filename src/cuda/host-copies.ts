// Host <-> device copies that cannot queue behind other streams' work. cuMemcpyHtoD and cuMemcpyDtoH
// run on the legacy stream, and measured at W = 8 ranks as threads on one H200 a rank's
// cuMemcpyDtoH (reading an agreed value between two timed loops) waited until its peers' kernels
// had ended, while those kernels waited for this rank's next call: every rank stuck until the
// timeout (docs/perf.md, "The one-GPU stall found"). Here each copy goes through pinned
// staging memory on a stream of its own (non-blocking) and the wait for it is bounded.
import { TimeoutError } from '../errors.js';
import { waitForEvent } from './wait.js';
import type { CudaDevice, CudaEvent, CudaStream, HostMapped } from './device.js';

/** Bytes staged at a time: large copies go in pieces, each waited for. */
const STAGING_BYTES = 8 << 20;

/** What the first copy opens: the stream, its event and the staging memory. */
interface Link {
  stream: CudaStream;
  event: CudaEvent;
  staging: HostMapped;
  view: Uint8Array;
}

export class HostCopies {
  readonly #device: CudaDevice;
  readonly #rank: number;
  readonly #timeoutMs: number;
  #link: Link | undefined;

  constructor(device: CudaDevice, rank: number, timeoutMs: number) {
    this.#device = device;
    this.#rank = rank;
    this.#timeoutMs = timeoutMs;
  }

  /** Copies `src` to device address `dst`; returns once the bytes are there. */
  upload(dst: bigint, src: Uint8Array): void {
    const link = this.#open();
    for (let at = 0; at < src.byteLength; at += STAGING_BYTES) {
      const n = Math.min(STAGING_BYTES, src.byteLength - at);
      link.view.set(src.subarray(at, at + n));
      this.#device.uploadAsync(dst + BigInt(at), link.staging.host, n, link.stream);
      this.#wait(link, 'a write to device memory');
    }
  }

  /** Fills `dst` from device address `src`. */
  download(dst: Uint8Array, src: bigint): void {
    const link = this.#open();
    for (let at = 0; at < dst.byteLength; at += STAGING_BYTES) {
      const n = Math.min(STAGING_BYTES, dst.byteLength - at);
      this.#device.downloadAsync(link.staging.host, src + BigInt(at), n, link.stream);
      this.#wait(link, 'a read of device memory');
      dst.set(link.view.subarray(0, n), at);
    }
  }

  close(): void {
    const link = this.#link;
    if (!link) return;
    this.#link = undefined;
    link.staging.release();
    link.event.destroy();
    this.#device.destroyStream(link.stream);
  }

  #open(): Link {
    if (this.#link) return this.#link;
    const staging = this.#device.hostMapped(STAGING_BYTES);
    this.#link = { stream: this.#device.createStream(), event: this.#device.createEvent(), staging, view: new Uint8Array(staging.view) };
    return this.#link;
  }

  #wait(link: Link, what: string): void {
    link.event.record(link.stream);
    if (!waitForEvent(link.event, this.#timeoutMs)) throw new TimeoutError(this.#rank, -1, this.#timeoutMs, `${what} did not finish on the device`);
  }
}
