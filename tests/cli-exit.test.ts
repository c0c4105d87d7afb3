// The line a failed `a2av` run ends with: a timeout under a --timeout-ms below the default says that
// the bound may be what is wrong (ranks sharing cores fall tens of ms apart between calls).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { errorLine } from '../src/cli/exit.js';
import { TimeoutError, UsageError } from '../src/errors.js';
import { reviveError, serializeError } from '../src/world/error-transfer.js';

describe('a2av error line', () => {
  it('a timeout under a short --timeout-ms names the bound and the way out, also as it comes from a rank thread', () => {
    const err = new TimeoutError(0, 2, 20, 'allToAllV: call 7 on the lane');
    for (const e of [err, reviveError(serializeError(err))]) {
      const line = errorLine(e);
      assert.ok(line.startsWith('rank 0: timed out after 20 ms waiting for rank 2 (allToAllV: call 7 on the lane) '), line);
      assert.match(line, /\(--timeout-ms 20 bounds every wait between ranks; .* raise it, or leave out --timeout-ms for 60000 ms\)$/);
    }
  });

  it('no hint at the default bound or above it, nor for other errors; one line of a multi-line message', () => {
    assert.equal(errorLine(new TimeoutError(1, 0, 60_000, 'barrier')), 'rank 1: timed out after 60000 ms waiting for rank 0 (barrier)');
    assert.equal(errorLine(new TimeoutError(1, -1, 120_000, 'barrier')), 'rank 1: timed out after 120000 ms waiting for a peer (barrier)');
    assert.equal(errorLine(new UsageError('bad\nsecond line')), 'bad');
  });
});
