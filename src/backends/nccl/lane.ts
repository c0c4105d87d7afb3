// One lane of the nccl backend: its own CUDA stream and its own NCCL communicator (NCCL runs one
// communicator's operations in issue order, so independent lanes need independent communicators),
// and the device and host buffers of the split exchange and of the rows' scratch. Buffers grow on
// demand: a 1-D call gathers W + 7 words a rank, a MoE call up to 2·W·256 + 7, so a 1-D job never
// holds the MoE sizes. They grow only while the lane's own stream no longer uses them (after a host
// wait); an outgrown device buffer is freed later, once every lane is idle (growing-buffer.ts).
import type { CudaDevice, CudaEvent, HostMapped } from '../../cuda/device.js';
import type { NcclCommunicator } from '../../nccl/communicator.js';
import { RECORD_HEADER_WORDS, Records, writeHeader, type RecordHeader } from '../../collectives/exchange-rules.js';
import { Routing } from '../../collectives/exchange-routing.js';
import { StreamLane } from '../stream-lane.js';
import { firstGatherWords, maxRecordWords } from './transfers.js';
import { GrowingBuffer } from './growing-buffer.js';

export class NcclLane extends StreamLane {
  readonly nccl: NcclCommunicator;
  readonly world: number;
  /** Recorded after the split exchange: the host waits for it before it can queue the data. */
  readonly exchanged: CudaEvent;
  /** Device: this rank's record (sized for the largest), and every rank's, gathered. */
  readonly payload: bigint;
  readonly #gathered = new GrowingBuffer();
  /** Device: rows between the input and a send, or a receive and the output (transfers.ts). */
  readonly #scratch = new GrowingBuffer();
  /** Host: the header to publish, and the one last uploaded (skipped when unchanged). */
  readonly header = new BigInt64Array(RECORD_HEADER_WORDS);
  readonly #headerWords = new Int32Array(this.header.buffer);
  readonly #uploaded = new BigInt64Array(RECORD_HEADER_WORDS).fill(-2n);
  /**
   * Host: the gathered records, as int32 pairs for Records, in pinned memory so the copy from the
   * device is queued on the lane's stream behind the gather (a legacy-stream cuMemcpyDtoH can wait
   * for other ranks' kernels: src/cuda/host-copies.ts).
   */
  #gatheredHost: HostMapped | undefined;
  #gatheredView = new Int32Array(0);
  /** Every rank's record, over the gathered host copy. */
  readonly records: Records;
  /** The current direct call's routing (reused). */
  readonly routing: Routing;
  /** Host: outSplitsOffsets to upload. */
  #offsets = new BigInt64Array(0);

  constructor(index: number, world: number, rank: number, device: CudaDevice, nccl: NcclCommunicator) {
    super(index, device.createStream(), device);
    this.nccl = nccl;
    this.world = world;
    this.exchanged = device.createEvent();
    this.payload = device.alloc(8 * maxRecordWords(world));
    this.#gathered.reserve(device, 8 * world * firstGatherWords('1d', world), () => true);
    this.#reserveHost(device, 2 * world * firstGatherWords('1d', world));
    this.records = new Records(world);
    this.routing = new Routing(rank, world);
  }

  /**
   * Device buffer for every rank's `words`-word record, grown if need be: no gather queued on the
   * lane may still be using it (each is waited for). `idle`: whether every lane of the
   * communicator is (growing-buffer.ts).
   */
  gathered(device: CudaDevice, words: number, idle: () => boolean): bigint {
    return this.#gathered.reserve(device, 8 * this.world * words, idle);
  }

  /** Device scratch for the rows, grown if need be: the lane's stream must be idle. */
  scratch(device: CudaDevice, bytes: number, idle: () => boolean): bigint {
    return this.#scratch.reserve(device, bytes, idle);
  }

  /** Writes `h` as the header to publish; true when it differs from the one on the device. */
  setHeader(h: RecordHeader): boolean {
    writeHeader(this.#headerWords, 0, h);
    for (let i = 0; i < RECORD_HEADER_WORDS; i++) {
      if (this.header[i] !== this.#uploaded[i]) {
        this.#uploaded.set(this.header);
        return true;
      }
    }
    return false;
  }

  /**
   * Queues the copy of every rank's `words`-word record (at device `gathered`) to the host on the
   * lane's stream and points `records` at it; read it only after the stream has passed this point.
   * Grows the pinned buffer, which no copy in flight uses: each gather's copy is waited for.
   */
  download(device: CudaDevice, gathered: bigint, words: number): void {
    const n = 2 * this.world * words;
    this.#reserveHost(device, n);
    for (let q = 0; q < this.world; q++) {
      this.records.words[q] = this.#gatheredView;
      this.records.base[q] = 2 * q * words;
    }
    device.downloadAsync(this.#gatheredHost!.host, gathered, 4 * n, this.stream);
  }

  /** At least `n` int32 of pinned memory for the gathered records (a 1-D job's from the start). */
  #reserveHost(device: CudaDevice, n: number): void {
    if (this.#gatheredView.length >= n) return;
    const mem = device.hostMapped(4 * n);
    this.#gatheredHost?.release();
    this.#gatheredHost = mem;
    this.#gatheredView = new Int32Array(mem.view);
  }

  /** Host outSplitsOffsets of `routing`, ready to upload. */
  offsetsOf(routing: Routing): BigInt64Array {
    const n = routing.splitsOffsetsWords;
    if (this.#offsets.length < n) this.#offsets = new BigInt64Array(n);
    routing.writeSplitsOffsets(new Int32Array(this.#offsets.buffer, 0, 2 * n));
    return this.#offsets.subarray(0, n);
  }

  /** Frees what the constructor made; the communicator is the caller's to end first. */
  override release(device: CudaDevice): void {
    this.exchanged.destroy();
    device.free(this.payload);
    this.#gathered.release(device);
    this.#scratch.release(device);
    this.#gatheredHost?.release();
    this.#gatheredHost = undefined;
    super.release(device);
  }
}
