// The line a failed `a2av` run ends with: a timeout under a --timeout-ms below the default says that
// the bound may be what is wrong (ranks sharing cores fall tens of ms apart between calls).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { errorLine, timeoutGiven } from '../src/cli/exit.js';
import { CommAbortedError, TimeoutError, UsageError } from '../src/errors.js';
import { reviveError, serializeError } from '../src/world/error-transfer.js';

describe('a2av error line', () => {
  it('a timeout under a short --timeout-ms names the bound and the way out, also as it comes from a rank thread', () => {
    timeoutGiven(20);
    const err = new TimeoutError(0, 2, 20, 'allToAllV: call 7 on the lane');
    for (const e of [err, reviveError(serializeError(err))]) {
      const line = errorLine(e);
      assert.ok(line.startsWith('rank 0: timed out after 20 ms waiting for rank 2 (allToAllV: call 7 on the lane) '), line);
      assert.match(line, /\(--timeout-ms 20 bounds every wait between ranks; .* raise it, or leave out --timeout-ms for 60000 ms\)$/);
    }
  });

  it('a set-up wait that ran out at its own floor, above the --timeout-ms given, says so and does not ask to raise the option', () => {
    timeoutGiven(2000);
    assert.equal(
      errorLine(new TimeoutError(0, 1, 10_000, 'init()')),
      'rank 0: timed out after 10000 ms waiting for rank 1 (init()) (set-up waits at least 10000 ms whatever --timeout-ms says: a rank not there by then is not coming)',
    );
  });

  it('a call refused because an earlier one timed out reads as that timeout, with its hint', () => {
    timeoutGiven(3000);
    const timedOut = new TimeoutError(0, 1, 3000, 'allToAllV: call 9 on the lane');
    const line = errorLine(new CommAbortedError(0, { cause: timedOut }));
    assert.ok(line.startsWith('rank 0: timed out after 3000 ms waiting for rank 1 (allToAllV: call 9 on the lane) (--timeout-ms 3000 bounds'), line);
    // Aborted for another reason: its own message.
    assert.match(errorLine(new CommAbortedError(0, { cause: new Error('boom') })), /^rank 0: communicator is aborted after an earlier failure: boom$/);
  });

  it('no hint at the default bound or above it, nor for other errors; one line of a multi-line message', () => {
    timeoutGiven(60_000);
    assert.equal(errorLine(new TimeoutError(1, 0, 60_000, 'barrier')), 'rank 1: timed out after 60000 ms waiting for rank 0 (barrier)');
    assert.equal(errorLine(new TimeoutError(1, -1, 120_000, 'barrier')), 'rank 1: timed out after 120000 ms waiting for a peer (barrier)');
    assert.equal(errorLine(new UsageError('bad\nsecond line')), 'bad');
  });
});
