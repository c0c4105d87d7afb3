// Shareable memory for CPU ranks that are processes: each allocation is a POSIX shared-memory
// object that the owner creates and maps and every peer maps by name. Names are unguessable
// (128 random bits) and start with the job's prefix; the owner unlinks the name as soon as every
// peer has mapped it (Rendezvous in rendezvous.ts). Until then a name outlives its process unless
// removed: the owner unlinks its names on exit and on a signal that would end it, peers drop the
// name of a rank that never said it had mapped the others (killed), or find by its prefix one it
// never said at all (the job's part of names is the same on every rank: a2av launch's job id, or
// one derived from the store), and a2av launch removes any still left. Waits sleep on futexes in the shared pages, so a peer's wake reaches another process.
import { createHash, randomBytes } from 'node:crypto';
import { freemem } from 'node:os';
import { readdirSync, rmSync, statfsSync } from 'node:fs';
import { join } from 'node:path';
import { UsageError } from '../../errors.js';
import { jobId, STORE_PORT_ENV, STORE_TOKEN_ENV } from '../../world/env.js';
import { shmPrefix, SHM_DIR } from '../../world/shm-files.js';
import { createShared, futexWait, futexWake, hasFutex, openShared, unlinkShared, unmap, type Mapping } from '../../native/libc.js';
import type { SharedMemory, SharedRegion } from './memory.js';

/**
 * A job id every rank of a job started by another launcher derives alike: from its store's address
 * and secret (two jobs at once cannot share both). It lets a peer find the names of a rank killed
 * before it published them. Undefined without a store token.
 */
function storeJob(): string | undefined {
  const token = process.env[STORE_TOKEN_ENV];
  if (!token) return undefined;
  const at = `${process.env.MASTER_ADDR ?? ''}:${process.env[STORE_PORT_ENV] || process.env.MASTER_PORT || ''}`;
  return createHash('sha256').update(`${at}\0${token}`).digest('hex').slice(0, 16);
}

/** Whether process `pid` exists (one of another user's counts: it cannot be signalled, but is there). */
function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Without futexes, waits poll at this period. */
const POLL_MS = 0.2;

const HANDLE = /^(\d{1,16}):(\/a2av-[A-Za-z0-9-]{1,200})$/;

export class ProcessMemory implements SharedMemory {
  readonly where = 'process';
  readonly named = true;
  #prefix: string;
  /** The job's part of every rank's names, where every rank derives the same one; else undefined. */
  #job: string | undefined;
  #count = 0;

  constructor(rank: number) {
    this.#job = jobId() ?? storeJob();
    // Neither a launcher's job id nor a store to derive one from: a random one keeps names apart.
    this.#prefix = `/${shmPrefix(this.#job ?? randomBytes(8).toString('hex'))}r${rank}-`;
  }

  dropUnpublished(peer: number): void {
    if (this.#job === undefined) return;
    const prefix = `${shmPrefix(this.#job)}r${peer}-`;
    let names: string[];
    try {
      names = readdirSync(SHM_DIR).filter((n) => n.startsWith(prefix));
    } catch {
      return;
    }
    // Only a dead process's: a peer that is merely slow, or another communicator of a live one, keeps its names.
    for (const n of names) {
      const pid = Number(/^(\d+)-/.exec(n.slice(prefix.length))?.[1]);
      if (Number.isSafeInteger(pid) && pid > 0 && !processAlive(pid)) rmSync(join(SHM_DIR, n), { force: true });
    }
  }

  allocate(bytes: number): SharedRegion {
    // The pid tells a peer whether the name's maker is gone (dropUnpublished).
    const name = `${this.#prefix}${process.pid}-${this.#count++}-${randomBytes(16).toString('hex')}`;
    // Listening before the file exists: a signal's default action would end the process at once.
    linked.add(name);
    syncCleanUp();
    let mapping: Mapping;
    try {
      mapping = createShared(name, Math.max(bytes, 1));
    } catch (err) {
      linked.delete(name); // createShared left nothing
      syncCleanUp();
      throw err;
    }
    return new ProcessRegion(name, bytes, mapping, true);
  }

  drop(handle: Uint8Array, peer: number): void {
    unlinkShared(parseHandle(handle, peer).name);
  }

  map(handle: Uint8Array, peer: number): SharedRegion {
    const { name, bytes } = parseHandle(handle, peer);
    return new ProcessRegion(name, bytes, openShared(name, Math.max(bytes, 1)), false);
  }

  sizeOf(handle: Uint8Array, peer: number): number {
    return parseHandle(handle, peer).bytes;
  }

  freeBytes(): number {
    const fs = statfsSync(SHM_DIR);
    return Math.min(freemem(), fs.bavail * fs.bsize);
  }
}

/** Names this process created that peers may still be mapping: an exit must not leave them in /dev/shm. */
const linked = new Set<string>();
const ENDING_SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const;
let cleaningUp = false;

function unlinkAll(): void {
  for (const name of linked) {
    try {
      unlinkShared(name);
    } catch {
      // Exiting: nothing left to tell.
    }
  }
  linked.clear();
  syncCleanUp();
}

/**
 * A signal that would have ended the process, had this listener not been added: unlink, then let
 * it end the process as it would have. Where the program listens too, the signal is its to handle
 * (it may carry on, and its names with it); its exit unlinks them.
 */
function onEndingSignal(signal: NodeJS.Signals): void {
  const alone = process.listenerCount(signal) === 1;
  if (!alone) return;
  unlinkAll();
  process.kill(process.pid, signal);
}

/** Listens for the process's end only while it has names to unlink, so a rank's signals are otherwise its own. */
function syncCleanUp(): void {
  const want = linked.size > 0;
  if (want === cleaningUp) return;
  cleaningUp = want;
  for (const signal of ENDING_SIGNALS) {
    if (want) process.on(signal, onEndingSignal);
    else process.off(signal, onEndingSignal);
  }
  if (want) process.on('exit', unlinkAll);
  else process.off('exit', unlinkAll);
}

function parseHandle(handle: Uint8Array, peer: number): { name: string; bytes: number } {
  const match = HANDLE.exec(new TextDecoder().decode(handle));
  if (!match) throw new UsageError(`rank ${peer} published a malformed shared-memory handle`);
  return { name: match[2]!, bytes: Number(match[1]) };
}

class ProcessRegion implements SharedRegion {
  readonly buffer: ArrayBuffer;
  readonly bytes: number;
  readonly handle: Uint8Array;
  #name: string;
  #mapping: Mapping | undefined;
  #address: number;
  /** Still to unlink: ours, and not yet unpublished. */
  #linked: boolean;
  #poll: Int32Array | undefined;

  constructor(name: string, bytes: number, mapping: Mapping, owned: boolean) {
    this.#name = name;
    this.#mapping = mapping;
    // A user-space address fits a double exactly (48 or 57 bits).
    this.#address = Number(mapping.address);
    this.#linked = owned;
    this.bytes = bytes;
    this.buffer = bytes === 0 ? new ArrayBuffer(0) : mapping.buffer;
    this.handle = new TextEncoder().encode(`${bytes}:${name}`);
  }

  wait(index: number, value: number, timeoutMs: number): void {
    if (hasFutex()) return futexWait(this.#address + 4 * index, value, timeoutMs);
    // Atomics.wait only sleeps on a SharedArrayBuffer: sleep on a private one, then look again.
    Atomics.wait((this.#poll ??= new Int32Array(new SharedArrayBuffer(4))), 0, 0, Math.min(timeoutMs, POLL_MS));
  }

  wake(index: number): void {
    if (hasFutex()) futexWake(this.#address + 4 * index);
  }

  unpublish(): void {
    if (!this.#linked) return;
    this.#linked = false;
    try {
      unlinkShared(this.#name);
    } finally {
      linked.delete(this.#name);
      syncCleanUp();
    }
  }

  close(): void {
    const mapping = this.#mapping;
    this.#mapping = undefined;
    try {
      this.unpublish();
    } finally {
      if (mapping) unmap(mapping);
    }
  }
}
