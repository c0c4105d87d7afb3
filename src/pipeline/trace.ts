// What a pipeline run records of its timed steps (spans on tracks: compute, the data stream, each
// lane) and the Chrome trace event format they are written in (Perfetto and chrome://tracing open it).
import { closeSync, openSync, writeSync } from 'node:fs';

/** The phases of a step, in issue order. */
export const PHASES = [
  'batch',
  'input dist lengths',
  'input dist ids',
  'lookup',
  'output dist',
  'bottom forward',
  'top forward',
  'top backward',
  'grad all-to-all',
  'embedding update',
  'bottom backward',
  'grad all-reduce',
  'sgd',
] as const;
export type Phase = (typeof PHASES)[number];

/** Tracks of a rank: its compute stream, its data stream (next batch and its splits), then lane 0, 1, ... */
export type Track = 'compute' | 'data' | `lane ${number}`;

export interface Span {
  track: Track;
  name: Phase;
  /** The timed step, from 1 (warm-up steps are not traced). */
  step: number;
  /** µs from the start of the timed steps (each rank's clock, lined up by an all-reduce). */
  startUs: number;
  endUs: number;
}

export interface RankTrace {
  rank: number;
  spans: Span[];
}

export interface ArmTrace {
  backend: string;
  arm: string;
  ranks: RankTrace[];
}

const SPAN_WORDS = 5;

function trackCode(t: Track): number {
  return t === 'compute' ? 0 : t === 'data' ? 1 : 2 + Number(t.slice('lane '.length));
}
function trackOf(code: number): Track {
  return code === 0 ? 'compute' : code === 1 ? 'data' : `lane ${code - 2}`;
}

/** Spans as float64 words, to gather them over the communicator. */
export function encodeSpans(spans: readonly Span[]): number[] {
  return spans.flatMap((s) => [trackCode(s.track), PHASES.indexOf(s.name), s.step, s.startUs, s.endUs]);
}

export function decodeSpans(words: ArrayLike<number>): Span[] {
  const spans: Span[] = [];
  for (let i = 0; i + SPAN_WORDS <= words.length; i += SPAN_WORDS) {
    spans.push({ track: trackOf(words[i]), name: PHASES[words[i + 1]], step: words[i + 2], startUs: words[i + 3], endUs: words[i + 4] });
  }
  return spans;
}

/**
 * The Chrome trace of several arms: a process per (arm, rank) named "<backend> <arm> · rank R",
 * a thread per track. Every arm starts at 0, so arms line up under each other for comparison.
 */
export interface ChromeTrace {
  traceEvents: object[];
  displayTimeUnit: string;
  otherData: { clock: string };
}

export function chromeTrace(arms: readonly ArmTrace[], clock: string): ChromeTrace {
  const events: object[] = [];
  // pid = arm * stride + rank: 1000, or more where an arm has 1000 ranks or more (else its ranks would share the next arm's pids).
  const most = Math.max(0, ...arms.flatMap((arm) => arm.ranks.map((r) => r.rank)));
  const stride = 10 ** Math.max(3, String(most).length);
  arms.forEach((arm, a) => {
    for (const { rank, spans } of arm.ranks) {
      const pid = a * stride + rank;
      events.push({ ph: 'M', pid, name: 'process_name', args: { name: `${arm.backend} ${arm.arm} · rank ${rank}` } });
      events.push({ ph: 'M', pid, name: 'process_sort_index', args: { sort_index: pid } });
      const tracks = [...new Set(spans.map((s) => s.track))].sort((x, y) => trackCode(x) - trackCode(y));
      for (const t of tracks) {
        events.push({ ph: 'M', pid, tid: trackCode(t), name: 'thread_name', args: { name: t } });
        events.push({ ph: 'M', pid, tid: trackCode(t), name: 'thread_sort_index', args: { sort_index: trackCode(t) } });
      }
      for (const s of spans) {
        events.push({ ph: 'X', pid, tid: trackCode(s.track), name: s.name, cat: s.track, ts: s.startUs, dur: Math.max(0, s.endUs - s.startUs), args: { step: s.step } });
      }
    }
  });
  return { traceEvents: events, displayTimeUnit: 'ms', otherData: { clock } };
}

/**
 * Writes a trace to `path` an event a line, in batches: the whole trace as one JSON.stringify passes
 * V8's longest string from about 4M events (13 a step, rank and arm: 3 arms of 8 ranks at 13k steps).
 */
export function writeChromeTrace(path: string, trace: ChromeTrace): void {
  try {
    writeEvents(path, trace);
  } catch (err) {
    // fs errors name neither the file nor what was being written.
    throw new Error(`${path}: the trace could not be written (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`, { cause: err });
  }
}

function writeEvents(path: string, trace: ChromeTrace): void {
  const fd = openSync(path, 'w');
  try {
    writeSync(fd, `{"displayTimeUnit":${JSON.stringify(trace.displayTimeUnit)},"otherData":${JSON.stringify(trace.otherData)},"traceEvents":[\n`);
    const events = trace.traceEvents;
    for (let i = 0; i < events.length; i += 4096) {
      const lines = events.slice(i, i + 4096).map((e) => JSON.stringify(e)).join(',\n');
      writeSync(fd, i === 0 ? lines : `,\n${lines}`);
    }
    writeSync(fd, '\n]}\n');
  } finally {
    closeSync(fd);
  }
}
