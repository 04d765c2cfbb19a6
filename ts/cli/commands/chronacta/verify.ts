/** `plexus chronacta verify`: check a data directory's logs, optionally cutting a damaged tail. */
import { join } from 'node:path';
import { findDataLogs, truncateDamagedTail } from '../../../chronacta/data-dir-logs.js';
import { PlexusError } from '../../../core/errors.js';
import { StorageCode, storageError } from '../../../storage/errors.js';
import type { VerifyProblem } from '../../../storage/types.js';
import { verifyLog } from '../../../storage/verify.js';
import { parse, UsageError } from '../../command.js';
import { out, warnLogger } from './shared.js';

export async function verify(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: { 'truncate-damaged-tail': { type: 'boolean' } },
  });
  if (positionals.length !== 1) throw new UsageError('chronacta', 'verify takes one data directory');
  const root = positionals[0] as string;
  const repair = values['truncate-damaged-tail'] === true;
  const fatal: (VerifyProblem & { dir: string })[] = [];
  const check = (dir: string) =>
    verifyLog(dir).catch((e: unknown) => {
      if (e instanceof PlexusError) throw e;
      throw storageError(StorageCode.IO, `cannot read the log in ${dir}: ${(e as Error).message}`, { dir }, e);
    });
  for (const { kind, dir } of await findDataLogs(root)) {
    let r = await check(dir);
    const isFatal = (p: VerifyProblem) => p.severity === 'fatal';
    // Only a damaged tail is cut on purpose; any other damage stays for the operator to restore.
    if (repair && r.problems.some(isFatal) && r.problems.filter(isFatal).every((p) => p.reason === 'damaged-tail')) {
      const dropped = await truncateDamagedTail(dir, warnLogger);
      out({ event: 'truncated-damaged-tail', log: kind, dir: r.dir, dropped });
      r = await check(dir);
    }
    out({
      log: kind,
      dir: r.dir,
      ok: r.ok,
      openable: r.openable,
      segments: r.segments,
      records: r.records,
      first: r.first,
      last: r.last,
      bytes: r.bytes,
      problems: r.problems,
    });
    for (const p of r.problems) if (isFatal(p)) fatal.push({ ...p, dir: r.dir });
  }
  const first = fatal[0];
  if (first) {
    const tail = fatal.some((p) => p.reason === 'damaged-tail') && !repair;
    throw storageError(
      StorageCode.CORRUPT,
      `${fatal.length} problem${fatal.length === 1 ? '' : 's'} would stop the store opening; the first: ` +
        `${join(first.dir, first.file)} is damaged at byte offset ${first.offset} (${first.reason}): ${first.message}. ` +
        `Restore the directory from a replica or a backup${tail ? ', or run verify --truncate-damaged-tail' : ''}`,
      { dir: first.dir, file: first.file, offset: first.offset, reason: first.reason, problems: fatal.length },
    );
  }
  return 0;
}
