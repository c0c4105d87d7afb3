// Runs the launcher in-process with its output captured, for tests that read ranks' lines.
import { Writable } from 'node:stream';
import { launch, type LaunchOptions } from '../../src/launch/launcher.js';

class Sink extends Writable {
  text = '';
  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: () => void): void {
    this.text += chunk.toString('utf8');
    callback();
  }
}

/** Launches, waits, and returns the exit code, both outputs and the wall time in ms. */
export async function runLaunch(options: Omit<LaunchOptions, 'stdout' | 'stderr'>) {
  const stdout = new Sink();
  const stderr = new Sink();
  const started = performance.now();
  const code = await launch({ ...options, stdout, stderr });
  return { code, stdout: stdout.text, stderr: stderr.text, ms: performance.now() - started };
}

/** The lines rank `rank` printed, without the launcher's "[rank R] " prefix. */
export const linesOf = (text: string, rank: number): string[] =>
  text.split('\n').filter((l) => l.startsWith(`[rank ${rank}] `)).map((l) => l.slice(`[rank ${rank}] `.length));
