// Host <-> device copies that cannot queue behind other streams' work. cuMemcpyHtoD and cuMemcpyDtoH
// run on the legacy stream, and measured at W = 8 ranks as threads on one H200 a rank's
// cuMemcpyDtoH (reading an agreed value between two timed loops) waited until its peers' kernels
// had ended, while those kernels waited for this rank's next call: every rank stuck until the
// timeout (docs/perf.md, "A stall in the one-GPU MoE exchange"). Here each copy goes through pinned
// staging memory on a stream of its own (non-blocking) and the wait for it is bounded.
import { TimeoutError } from '../errors.js';
import { waitForEvent } from '../backends/cuda/wait.js';
import type { CudaDevice, CudaEvent, CudaStream } from './device.js';

/** Bytes staged at a time: large copies go in pieces, each waited for. */
const STAGING_BYTES = 8 << 20;

interface Staging {
  host: bigint;
  view: Uint8Array;
  release: () => void;
}

export class HostCopies {
  readonly #device: CudaDevice;
  readonly #rank: number;
  readonly #timeoutMs: number;
  #stream: CudaStream | undefined;
  #event: CudaEvent | undefined;
  #staging: Staging | undefined;

  constructor(device: CudaDevice, rank: number, timeoutMs: number) {
    this.#device = device;
    this.#rank = rank;
    this.#timeoutMs = timeoutMs;
  }

  /** Copies `src` to device address `dst`; returns once the bytes are there. */
  upload(dst: bigint, src: Uint8Array): void {
    const staging = this.#open();
    for (let at = 0; at < src.byteLength; at += STAGING_BYTES) {
      const n = Math.min(STAGING_BYTES, src.byteLength - at);
      staging.view.set(src.subarray(at, at + n));
      this.#device.uploadAsync(dst + BigInt(at), staging.host, n, this.#stream!);
      this.#wait('a write to device memory');
    }
  }

  /** Fills `dst` from device address `src`. */
  download(dst: Uint8Array, src: bigint): void {
    const staging = this.#open();
    for (let at = 0; at < dst.byteLength; at += STAGING_BYTES) {
      const n = Math.min(STAGING_BYTES, dst.byteLength - at);
      this.#device.downloadAsync(staging.host, src + BigInt(at), n, this.#stream!);
      this.#wait('a read of device memory');
      dst.set(staging.view.subarray(0, n), at);
    }
  }

  close(): void {
    this.#staging?.release();
    this.#staging = undefined;
    if (this.#event) this.#event.destroy();
    if (this.#stream) this.#device.destroyStream(this.#stream);
    this.#event = this.#stream = undefined;
  }

  #open(): Staging {
    if (this.#staging) return this.#staging;
    this.#device.makeCurrent();
    this.#stream = this.#device.createStream();
    this.#event = this.#device.createEvent();
    const mapped = this.#device.hostMapped(STAGING_BYTES);
    this.#staging = { host: mapped.host, view: new Uint8Array(mapped.view), release: mapped.release };
    return this.#staging;
  }

  #wait(what: string): void {
    this.#event!.record(this.#stream!);
    if (!waitForEvent(this.#event!, this.#timeoutMs)) throw new TimeoutError(this.#rank, -1, this.#timeoutMs, `${what} did not finish on the device`);
  }
}
