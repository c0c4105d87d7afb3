// How a rank words a value the ranks had to share and did not: every rank sees every rank's value,
// so every rank refuses with the same account of who had what, grouped (72 ranks, one odd, read
// as two groups, not 72 entries).

/** "1024 bytes on ranks 0, 2-5; 2048 bytes on rank 1": the ranks grouped by value, in first-seen order. */
export function ranksByValue<T>(values: readonly T[], show: (v: T) => string = String): string {
  const groups = new Map<string, number[]>();
  for (const [rank, v] of values.entries()) {
    const key = show(v);
    const ranks = groups.get(key);
    if (ranks === undefined) groups.set(key, [rank]);
    else ranks.push(rank);
  }
  return [...groups].map(([shown, ranks]) => `${shown} on ${ranks.length === 1 ? 'rank' : 'ranks'} ${rankRanges(ranks)}`).join('; ');
}

/** Ascending ranks as "0, 2-5, 9". */
export function rankRanges(ranks: readonly number[]): string {
  const parts: string[] = [];
  for (let i = 0; i < ranks.length; ) {
    let j = i;
    while (j + 1 < ranks.length && ranks[j + 1] === ranks[j]! + 1) j++;
    parts.push(j === i ? `${ranks[i]}` : `${ranks[i]}-${ranks[j]}`);
    i = j + 1;
  }
  return parts.join(', ');
}

/** The message for sizes that differ between ranks, or undefined when every rank asked for the same. */
export function sizeDisagreement(rank: number, what: string, sizes: readonly number[]): string | undefined {
  if (sizes.every((b) => b === sizes[0])) return undefined;
  return `rank ${rank}: ${what}: ranks asked for different sizes (${ranksByValue(sizes, (b) => `${b} bytes`)}); every rank must ask for the same size`;
}
