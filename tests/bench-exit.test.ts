// A wrong result ends `a2av bench` with a non-zero exit status on every rank, and the rank that found
// it names the first wrong byte. Ranks as processes under a2av launch, so a preloaded fixture can
// make one rank's check fail (threads: tests/bench-sweep.test.ts).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { linesOf, runLaunch } from './support/launch-capture.js';

const node = process.execPath;
const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
const wrongOnRank1 = pathToFileURL(fileURLToPath(new URL('./fixtures/bench-wrong-byte.js', import.meta.url))).href;

describe('a2av bench with a wrong result', () => {
  test('exits non-zero; rank 1 names the first wrong byte, rank 0 names rank 1 and prints no table', { timeout: 60_000 }, async () => {
    const { code, stdout, stderr } = await runLaunch({
      nprocs: 2,
      command: [node, '--import', wrongOnRank1, cli, 'bench', '--backend', 'cpu', '--max', '1M', '--repeats', '1'],
    });
    assert.notEqual(code, 0, stderr);
    const [finder] = linesOf(stderr, 1).filter((l) => l.startsWith('a2av: '));
    assert.match(finder ?? '', /^a2av: rank 1: eager all-to-all-v gave a wrong result at 512 KiB per rank: output byte 0: row 0 from rank 0, byte 0 of the row, is 0x[0-9a-f]{2}, expected 0x[0-9a-f]{2}$/, stderr);
    const [told] = linesOf(stderr, 0).filter((l) => l.startsWith('a2av: '));
    assert.match(told ?? '', /^a2av: rank 1: eager all-to-all-v gave a wrong result at 512 KiB per rank: found by rank 1, reported to rank 0 \(its error names the first wrong byte\)$/, stderr);
    assert.doesNotMatch(stdout, /a2av bench:/, 'no table of the sizes before it either');
  });
});
