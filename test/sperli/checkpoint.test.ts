/**
 * SPERLI checkpoints and resume (docs/sperli-checkpoints.md) on the in-memory transport
 * with real files in a temporary directory and real job keys: every rank's state comes
 * back, retention keeps e and e - 1, damaged files come from the buddy, failures give
 * the same code on every rank, forged and foreign COMMIT files are never used.
 */
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeRankFile, rankFileDigest } from '../../ts/codec/sperli-files.js';
import { isPlexusError, type PlexusError } from '../../ts/core/errors.js';
import { CompositeSig } from '../../ts/crypto/index.js';
import {
  type Checkpointable,
  type CheckpointContext,
  type CheckpointStore,
  checkpointContextOf,
  fileStore,
} from '../../ts/sperli/checkpoint.js';
import { Comm } from '../../ts/sperli/comm.js';
import { makeJob } from '../../ts/sperli/job.js';
import { createMemoryTransports } from '../../ts/sperli/memory-transport.js';
import { openMesh } from '../../ts/sperli/mesh.js';
import { signCommit } from '../../ts/sperli/tokens.js';
import { makeTestJob } from '../helpers/sperli-job.js';

interface State {
  readonly rank: number;
  readonly step: number;
  readonly note: string;
}

const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder('utf-8', { fatal: true });

const codec: Checkpointable<State> = {
  encode: (s) => utf8.encode(JSON.stringify(s)),
  decode: (b) => {
    const v = JSON.parse(fromUtf8.decode(b)) as State;
    if (typeof v.rank !== 'number' || typeof v.step !== 'number') throw new Error('not a State');
    return v;
  },
};

const bytesCodec: Checkpointable<Uint8Array> = { encode: (b) => b, decode: (b) => b.slice() };

const state = (rank: number, step: number): State => ({ rank, step, note: `rank ${rank} at step ${step}` });

let root: string;
let keys: { publicKey: Uint8Array; secretKey: Uint8Array };
let jobSeq = 0;

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'plexus-ckpt-'));
  const job = await makeJob({ hosts: [{ name: '127.0.0.1', port: 1 }] });
  keys = { publicKey: job.publicKey, secretKey: job.secretKey };
});

afterAll(() => rmSync(root, { recursive: true, force: true }));

type DirLayout = 'shared' | 'per-rank';

/** One job: its id and directories; each `run` is one incarnation on fresh in-memory transports. */
class Job {
  readonly jobId: Uint8Array;
  readonly hex: string;
  readonly dirs: string[];
  incarnation = 0;
  stores: ((rank: number) => CheckpointStore | undefined) | undefined;

  constructor(
    readonly size: number,
    readonly layout: DirLayout,
  ) {
    this.jobId = Uint8Array.from({ length: 16 }, (_, i) => (i * 31 + ++jobSeq) & 255);
    this.hex = Buffer.from(this.jobId).toString('hex');
    const base = join(root, `job-${jobSeq}`);
    this.dirs = Array.from({ length: size }, (_, r) => (layout === 'shared' ? base : join(base, `host-${r}`)));
  }

  context(rank: number): CheckpointContext {
    const store = this.stores?.(rank);
    return {
      dir: this.dirs[rank % this.dirs.length] as string,
      jobId: this.jobId,
      publicKey: keys.publicKey,
      secretKey: rank === 0 ? keys.secretKey : null,
      ...(store ? { store } : {}),
    };
  }

  /** New communicators of the next incarnation (size may differ, to test H1623). */
  start(size = this.size): Comm[] {
    this.incarnation++;
    return createMemoryTransports(size, { jobId: this.jobId, incarnation: this.incarnation }).map(
      (t, r) => new Comm(t, { checkpoint: this.context(r) }),
    );
  }

  /** Runs `body` on every rank of a new incarnation, then finalizes. */
  async run<T>(body: (c: Comm) => Promise<T>, size = this.size): Promise<T[]> {
    const comms = this.start(size);
    const out = await Promise.all(comms.map(body));
    await Promise.all(comms.map((c) => c.finalize()));
    return out;
  }

  /** Runs `body` on every rank of a new incarnation and returns how each call settled. */
  async settle<T>(
    body: (c: Comm) => Promise<T>,
    size = this.size,
  ): Promise<{ comms: Comm[]; settled: PromiseSettledResult<T>[] }> {
    const comms = this.start(size);
    const settled = await Promise.allSettled(comms.map(body));
    return { comms, settled };
  }

  /** Checkpoints steps 1..n (epochs 1..n) in one incarnation. */
  checkpoints(n: number): Promise<bigint[][]> {
    return this.run(async (c) => {
      const epochs: bigint[] = [];
      for (let step = 1; step <= n; step++) epochs.push(await c.checkpoint(state(c.rank, step), codec));
      return epochs;
    });
  }

  dir(rank: number): string {
    return join(this.dirs[rank] as string, this.hex);
  }

  epochDir(rank: number, epoch: number): string {
    return join(this.dir(rank), String(epoch));
  }

  file(rank: number, epoch: number, name: string): string {
    return join(this.epochDir(rank, epoch), name);
  }

  /** The rank file of `rank` and the buddy copy of it (held by rank + 1). */
  copies(rank: number, epoch: number): [string, string] {
    return [
      this.file(rank, epoch, `rank-${rank}.ckpt`),
      this.file((rank + 1) % this.size, epoch, `rank-${rank}.ckpt.buddy`),
    ];
  }

  /** Every distinct COMMIT path of `epoch`. */
  commits(epoch: number): string[] {
    return [...new Set(this.dirs.map((_, r) => this.file(r, epoch, 'COMMIT')))];
  }

  epochs(rank: number): string[] {
    return readdirSync(this.dir(rank)).sort();
  }
}

function flipByte(path: string, at: number): void {
  const b = readFileSync(path);
  const i = at < 0 ? b.length + at : at;
  b[i] = (b[i] as number) ^ 0x40;
  writeFileSync(path, b);
}

function truncate(path: string, keep: number): void {
  writeFileSync(path, readFileSync(path).subarray(0, keep));
}

function codes<T>(settled: PromiseSettledResult<T>[]): string[] {
  return settled.map((s) => {
    if (s.status === 'fulfilled') return 'ok';
    return isPlexusError(s.reason) ? s.reason.code : String(s.reason);
  });
}

function reasonOf<T>(s: PromiseSettledResult<T>): PlexusError {
  if (s.status !== 'rejected' || !isPlexusError(s.reason)) throw new Error(`not a PlexusError: ${String(s)}`);
  return s.reason;
}

const resumeAll = (j: Job) => j.run((c) => c.resume(codec));

describe.each<DirLayout>(['shared', 'per-rank'])('checkpoint and resume, %s checkpoint directory', (layout) => {
  it('a fresh start resumes null; a checkpoint then a resume restores every rank', async () => {
    const j = new Job(3, layout);
    const first = await j.run(async (c) => {
      const resumed = await c.resume(codec);
      const epoch = await c.checkpoint(state(c.rank, 7), codec);
      return { resumed, epoch };
    });
    expect(first).toEqual([0, 1, 2].map(() => ({ resumed: null, epoch: 1n })));
    for (let r = 0; r < 3; r++) {
      expect(readdirSync(j.epochDir(r, 1)).sort()).toEqual(
        layout === 'shared'
          ? [
              'COMMIT',
              'rank-0.ckpt',
              'rank-0.ckpt.buddy',
              'rank-1.ckpt',
              'rank-1.ckpt.buddy',
              'rank-2.ckpt',
              'rank-2.ckpt.buddy',
            ]
          : ['COMMIT', `rank-${r}.ckpt`, `rank-${(r + 2) % 3}.ckpt.buddy`].sort(),
      );
      const [own, buddy] = j.copies(r, 1);
      expect(readFileSync(buddy)).toEqual(readFileSync(own));
    }
    expect(await resumeAll(j)).toEqual([0, 1, 2].map((r) => state(r, 7)));
  });

  it('repeated checkpoints keep only e and e - 1; a later directory and other names stay', async () => {
    const j = new Job(3, layout);
    expect(await j.checkpoints(2)).toEqual([0, 1, 2].map(() => [1n, 2n]));
    for (let r = 0; r < 3; r++) {
      mkdirSync(j.epochDir(r, 9), { recursive: true });
      writeFileSync(join(j.epochDir(r, 9), 'rank-0.ckpt'), 'a later epoch being written');
      mkdirSync(join(j.dir(r), 'notes'), { recursive: true });
    }
    const more = await j.run(async (c) => {
      expect(await c.resume(codec)).toEqual(state(c.rank, 2));
      return [await c.checkpoint(state(c.rank, 3), codec), await c.checkpoint(state(c.rank, 4), codec)];
    });
    expect(more).toEqual([0, 1, 2].map(() => [3n, 4n]));
    for (let r = 0; r < 3; r++) expect(j.epochs(r)).toEqual(['3', '4', '9', 'notes']);
    expect(await resumeAll(j)).toEqual([0, 1, 2].map((r) => state(r, 4)));
  });

  it.each([
    ['deleted', (p: string) => unlinkSync(p)],
    ['truncated', (p: string) => truncate(p, 100)],
    ['with one byte flipped', (p: string) => flipByte(p, -3)],
    ['with a header byte flipped', (p: string) => flipByte(p, 30)],
  ])('a rank file %s is fetched from its buddy and put back', async (_name, damage) => {
    const j = new Job(3, layout);
    await j.checkpoints(2);
    const [own] = j.copies(1, 2);
    const good = readFileSync(own);
    damage(own);
    expect(await resumeAll(j)).toEqual([0, 1, 2].map((r) => state(r, 2)));
    expect(readFileSync(own)).toEqual(good);
  });

  it('a state of several MiB goes to the buddy in 1 MiB chunks and comes back from it', async () => {
    const j = new Job(2, layout);
    const big = [0, 1].map((rank) => {
      const b = new Uint8Array(2.5 * 1048576 + 17);
      for (let i = 0; i < b.length; i++) b[i] = (i * 7 + rank) & 255;
      return b;
    });
    await j.run((c) => c.checkpoint(big[c.rank] as Uint8Array, bytesCodec));
    unlinkSync(j.copies(0, 1)[0]);
    flipByte(j.copies(1, 1)[0], 1_500_000);
    const back = await j.run((c) => c.resume(bytesCodec));
    // Buffer.equals: a deep equality of millions of elements would take seconds.
    expect(back.map((b, r) => Buffer.from(b as Uint8Array).equals(big[r] as Uint8Array))).toEqual([true, true]);
  });

  it('a job of one rank keeps its buddy copy beside its own file', async () => {
    const j = new Job(1, layout);
    expect(await j.checkpoints(3)).toEqual([[1n, 2n, 3n]]);
    expect(j.epochs(0)).toEqual(['2', '3']);
    expect(readdirSync(j.epochDir(0, 3)).sort()).toEqual(['COMMIT', 'rank-0.ckpt', 'rank-0.ckpt.buddy']);
    flipByte(j.copies(0, 3)[0], -1);
    expect(await resumeAll(j)).toEqual([state(0, 3)]);
  });
});

describe('both copies of a rank file bad', () => {
  it.each([
    ['flipped', 'H1620', (p: string) => flipByte(p, -2)],
    ['truncated', 'H1619', (p: string) => truncate(p, 60)],
    ['deleted', 'H1619', (p: string) => unlinkSync(p)],
  ])(
    '%s: the previous epoch is resumed when it has a valid COMMIT, else %s on every rank',
    async (_n, code, damage) => {
      const j = new Job(3, 'per-rank');
      await j.checkpoints(2);
      for (const p of j.copies(2, 2)) damage(p);
      expect(await resumeAll(j)).toEqual([0, 1, 2].map((r) => state(r, 1)));

      const only = new Job(3, 'per-rank');
      await only.checkpoints(1);
      for (const p of only.copies(2, 1)) damage(p);
      const { settled } = await only.settle((c) => c.resume(codec));
      expect(codes(settled)).toEqual([code, code, code]);
      expect(reasonOf(settled[2] as PromiseSettledResult<unknown>).details).toMatchObject({ rank: 2, epoch: 1n });
      expect(reasonOf(settled[0] as PromiseSettledResult<unknown>).details).toMatchObject({
        reason: 'other-rank',
        rank: 2,
      });
    },
  );
});

describe('files in the wrong place', () => {
  it("another rank's file in place of both copies is H1619 (rank) on every rank", async () => {
    const j = new Job(3, 'shared');
    await j.checkpoints(1);
    const stranger = readFileSync(j.copies(1, 1)[0]);
    for (const p of j.copies(2, 1)) writeFileSync(p, stranger);
    const { settled } = await j.settle((c) => c.resume(codec));
    expect(codes(settled)).toEqual(['H1619', 'H1619', 'H1619']);
    expect(reasonOf(settled[2] as PromiseSettledResult<unknown>).details).toMatchObject({ reason: 'rank', rank: 2 });
  });

  it('a COMMIT copied into the directory of another epoch does not count there', async () => {
    const j = new Job(2, 'per-rank');
    await j.checkpoints(2);
    for (let r = 0; r < 2; r++) writeFileSync(j.file(r, 2, 'COMMIT'), readFileSync(j.file(r, 1, 'COMMIT')));
    expect(await resumeAll(j)).toEqual([state(0, 1), state(1, 1)]);
  });
});

describe('COMMIT files', () => {
  it('a COMMIT with a bad signature does not count: the previous epoch is resumed, with none H1621', async () => {
    const j = new Job(3, 'per-rank');
    await j.checkpoints(2);
    for (const p of j.commits(2)) flipByte(p, -5);
    expect(await resumeAll(j)).toEqual([0, 1, 2].map((r) => state(r, 1)));

    const only = new Job(3, 'shared');
    await only.checkpoints(1);
    for (const p of only.commits(1)) flipByte(p, -5);
    const { settled } = await only.settle((c) => c.resume(codec));
    expect(codes(settled)).toEqual(['H1621', 'H1621', 'H1621']);
    expect(reasonOf(settled[1] as PromiseSettledResult<unknown>).details.reason).toBe('signature');
  });

  it("a COMMIT damaged on rank 0 only is taken from another rank's offer and put back", async () => {
    const j = new Job(3, 'per-rank');
    await j.checkpoints(2);
    const [mine, theirs] = [j.file(0, 2, 'COMMIT'), j.file(1, 2, 'COMMIT')];
    truncate(mine, 100);
    expect(await resumeAll(j)).toEqual([0, 1, 2].map((r) => state(r, 2)));
    expect(readFileSync(mine)).toEqual(readFileSync(theirs));
  });

  it('a signed COMMIT of another size is refused with H1623 on every rank', async () => {
    const j = new Job(3, 'shared');
    await j.checkpoints(2);
    const { settled } = await j.settle((c) => c.resume(codec), 2);
    expect(codes(settled)).toEqual(['H1623', 'H1623']);
  });

  it('a forged COMMIT signed by another key is never used', async () => {
    const j = new Job(2, 'per-rank');
    await j.checkpoints(1);
    const forger = CompositeSig.keygen();
    const forge = (epoch: number) => {
      const files = [0, 1].map((r) =>
        encodeRankFile({ jobId: j.jobId, epoch: BigInt(epoch), rank: r, size: 2 }, codec.encode(state(r, 666))),
      );
      const commit = signCommit(forger.secretKey, {
        jobId: j.jobId,
        epoch: BigInt(epoch),
        hashes: files.map(rankFileDigest),
      });
      for (let r = 0; r < 2; r++) {
        mkdirSync(j.epochDir(r, epoch), { recursive: true });
        writeFileSync(j.file(r, epoch, `rank-${r}.ckpt`), files[r] as Uint8Array);
        writeFileSync(j.file(r, epoch, `rank-${(r + 1) % 2}.ckpt.buddy`), files[(r + 1) % 2] as Uint8Array);
        writeFileSync(j.file(r, epoch, 'COMMIT'), commit);
      }
    };
    forge(2);
    expect(await resumeAll(j)).toEqual([state(0, 1), state(1, 1)]);
    // Over a genuine epoch the forgery is refused too, and nothing else holds.
    forge(1);
    const { settled } = await j.settle((c) => c.resume(codec));
    expect(codes(settled)).toEqual(['H1621', 'H1621']);
  });
});

describe('nothing to resume', () => {
  it('an empty directory and an interrupted first checkpoint are a fresh start', async () => {
    const j = new Job(2, 'shared');
    expect(await resumeAll(j)).toEqual([null, null]);
    await j.checkpoints(1);
    for (const p of j.commits(1)) unlinkSync(p);
    expect(await resumeAll(j)).toEqual([null, null]);
  });

  it('H1622 on every rank when every COMMIT is gone after epochs were committed', async () => {
    const j = new Job(3, 'per-rank');
    await j.checkpoints(2);
    for (const e of [1, 2]) for (const p of j.commits(e)) unlinkSync(p);
    const { settled } = await j.settle((c) => c.resume(codec));
    expect(codes(settled)).toEqual(['H1622', 'H1622', 'H1622']);
    expect(reasonOf(settled[0] as PromiseSettledResult<unknown>).details).toMatchObject({
      reason: 'nothing-resumable',
      highestEpoch: 2n,
    });
  });
});

describe('an interrupted checkpoint', () => {
  it('rank 0 failing before COMMIT: every rank fails, resume uses the previous epoch, the next checkpoint redoes it', async () => {
    const j = new Job(3, 'per-rank');
    await j.checkpoints(1);
    const failing: CheckpointStore = {
      ...fileStore,
      write: async (path, bytes) => {
        if (path.endsWith(join('2', 'COMMIT'))) throw new Error('disk gone');
        return fileStore.write(path, bytes);
      },
    };
    j.stores = (rank) => (rank === 0 ? failing : undefined);
    const { comms, settled } = await j.settle(async (c) => {
      expect(await c.resume(codec)).toEqual(state(c.rank, 1));
      return c.checkpoint(state(c.rank, 2), codec);
    });
    expect(codes(settled)).toEqual(['PLX_SPERLI_CHECKPOINT_IO', 'H1612', 'H1612']);
    expect(comms[1]?.failed?.details).toMatchObject({ abortReason: 5 });
    for (let r = 0; r < 3; r++) {
      expect(existsSync(j.file(r, 2, `rank-${r}.ckpt`))).toBe(true);
      expect(existsSync(j.file(r, 2, 'COMMIT'))).toBe(false);
    }
    j.stores = undefined;
    const again = await j.run(async (c) => {
      const back = await c.resume(codec);
      return { back, epoch: await c.checkpoint(state(c.rank, 3), codec) };
    });
    expect(again).toEqual([0, 1, 2].map((r) => ({ back: state(r, 1), epoch: 2n })));
    expect(await resumeAll(j)).toEqual([0, 1, 2].map((r) => state(r, 3)));
  });
});

describe('the open-handle rule', () => {
  it('a checkpoint with an open irecv on one rank fails with H1624 on every rank (ABORT reason 5)', async () => {
    const j = new Job(3, 'shared');
    const { comms, settled } = await j.settle(async (c) => {
      if (c.rank === 2)
        c.irecv(0, 5)
          .wait()
          .catch(() => {});
      return c.checkpoint(state(c.rank, 1), codec);
    });
    expect(codes(settled)).toEqual(['H1624', 'H1624', 'H1624']);
    expect(reasonOf(settled[0] as PromiseSettledResult<unknown>).details).toMatchObject({
      reason: 'open-requests',
      openRequests: { 2: 1 },
    });
    for (const c of comms) {
      const f = c.failed as PlexusError;
      expect(f.code === 'H1624' || f.details.abortReason === 5).toBe(true);
    }
    expect(existsSync(j.dir(0))).toBe(false);
  });
});

describe('calls and codecs', () => {
  it('one rank with a codec that cannot encode ends the job (PLX_SPERLI_CHECKPOINT_STATE, ABORT reason 5)', async () => {
    const j = new Job(2, 'shared');
    const broken: Checkpointable<State> = {
      ...codec,
      encode: () => {
        throw new Error('no');
      },
    };
    const { settled } = await j.settle((c) => c.checkpoint(state(c.rank, 1), c.rank === 1 ? broken : codec));
    expect(codes(settled)).toEqual(['H1612', 'PLX_SPERLI_CHECKPOINT_STATE']);
    expect(reasonOf(settled[0] as PromiseSettledResult<unknown>).details.abortReason).toBe(5);
  });

  it('a state the codec cannot decode is PLX_SPERLI_CHECKPOINT_STATE on every rank', async () => {
    const j = new Job(2, 'shared');
    await j.checkpoints(1);
    const strict: Checkpointable<State> = {
      ...codec,
      decode: () => {
        throw new Error('format 2 expected');
      },
    };
    const { settled } = await j.settle((c) => c.resume(strict));
    expect(codes(settled)).toEqual(['PLX_SPERLI_CHECKPOINT_STATE', 'PLX_SPERLI_CHECKPOINT_STATE']);
  });

  it('without a checkpoint directory, or after finalize, a call is refused', async () => {
    const bare = createMemoryTransports(1).map((t) => new Comm(t))[0] as Comm;
    await expect(bare.checkpoint(state(0, 1), codec)).rejects.toMatchObject({
      code: 'PLX_SPERLI_BAD_ARGUMENT',
      details: { reason: 'checkpoint-dir' },
    });
    const j = new Job(1, 'shared');
    const [c] = j.start() as [Comm];
    await c.finalize();
    await expect(c.checkpoint(state(0, 1), codec)).rejects.toMatchObject({ code: 'PLX_SPERLI_CLOSED' });
    await expect(c.resume(codec)).rejects.toMatchObject({ code: 'PLX_SPERLI_CLOSED' });
  });

  it('rank 0 needs the secret key; checkpointContextOf takes it from the job description', async () => {
    const job = await makeJob({
      hosts: [
        { name: '127.0.0.1', port: 1 },
        { name: '127.0.0.2', port: 2 },
      ],
    });
    const dir = join(root, 'from-description');
    const contexts = job.descriptions.map((d) => checkpointContextOf(d, dir));
    expect(contexts[0]?.secretKey).toEqual(job.secretKey);
    expect(contexts[1]?.secretKey).toBeNull();
    const [t0] = createMemoryTransports(2);
    expect(
      () => new Comm(t0 as never, { checkpoint: { ...(contexts[0] as CheckpointContext), secretKey: null } }),
    ).toThrow(expect.objectContaining({ code: 'PLX_SPERLI_BAD_ARGUMENT' }));
    const comms = createMemoryTransports(2, { jobId: job.jobId }).map(
      (t, r) => new Comm(t, { checkpoint: contexts[r] }),
    );
    expect(await Promise.all(comms.map((c) => c.checkpoint(state(c.rank, 1), codec)))).toEqual([1n, 1n]);
    expect(await Promise.all(comms.map((c) => c.resume(codec)))).toEqual([state(0, 1), state(1, 1)]);
    await Promise.all(comms.map((c) => c.finalize()));
  });
});

describe('over the TLS 1.3 mesh', () => {
  it('ranks on 127.0.0.1..3 checkpoint, restart as incarnation 2 and resume, one file from its buddy', async () => {
    const dir = join(root, 'tls');
    const mesh = { silenceMs: 5000, heartbeatMs: 500, connectTimeoutMs: 5000, retryMs: 50 };
    const first = await makeTestJob({ size: 3 });
    const comms = async (job: typeof first) => {
      const transports = await Promise.all(job.descriptions.map((d) => openMesh(d, mesh)));
      return transports.map(
        (t, r) => new Comm(t, { checkpoint: checkpointContextOf(job.descriptions[r]!, join(dir, `host-${r}`)) }),
      );
    };
    const one = await comms(first);
    const epochs = await Promise.all(
      one.map(async (c) => {
        expect(await c.resume(codec)).toBeNull();
        await c.checkpoint(state(c.rank, 1), codec);
        return c.checkpoint(state(c.rank, 2), codec);
      }),
    );
    expect(epochs).toEqual([2n, 2n, 2n]);
    await Promise.all(one.map((c) => c.finalize()));
    unlinkSync(join(dir, 'host-1', first.jobHex, '2', 'rank-1.ckpt'));

    const again = await makeTestJob({ size: 3, jobId: first.jobId, keys: first.keys, incarnation: 2 });
    const two = await comms(again);
    expect(await Promise.all(two.map((c) => c.resume(codec)))).toEqual([0, 1, 2].map((r) => state(r, 2)));
    await Promise.all(two.map((c) => c.finalize()));
  });
});

describe('buddy copies taken piece by piece over the TLS 1.3 mesh', () => {
  const mesh = { silenceMs: 5000, heartbeatMs: 500, connectTimeoutMs: 5000, retryMs: 50 };
  const bigState = (rank: number): Uint8Array => {
    const b = new Uint8Array(3 * 1048576 + 333);
    for (let i = 0; i < b.length; i += 97) b[i] = (i + rank * 13) & 255;
    return b;
  };

  /** Comms of a 3-rank mesh job, each rank with a directory of its own and the store `storeOf(rank)`. */
  async function meshComms(
    dir: string,
    storeOf: (rank: number) => CheckpointStore | undefined,
    job?: Awaited<ReturnType<typeof makeTestJob>>,
  ) {
    const j = job ?? (await makeTestJob({ size: 3 }));
    const transports = await Promise.all(j.descriptions.map((d) => openMesh(d, mesh)));
    const comms = transports.map(
      (t, r) =>
        new Comm(t, { checkpoint: checkpointContextOf(j.descriptions[r]!, join(dir, `host-${r}`), storeOf(r)) }),
    );
    return { job: j, comms };
  }

  it('each piece is copied into the writer as it comes off the connection, the read buffer used again at once', async () => {
    const dir = join(root, 'tls-pieces');
    const pieces: number[] = [];
    // Every piece is overwritten as soon as the writer's copy returns, as the next read would.
    const scribbling: CheckpointStore = {
      ...fileStore,
      begin: async (path) => {
        const w = await fileStore.begin(path);
        return {
          write: (b) => w.write(b),
          writev: (parts) => (w.writev as NonNullable<typeof w.writev>)(parts),
          copy: (b) => {
            (w.copy as NonNullable<typeof w.copy>)(b);
            pieces.push(b.length);
            b.fill(0x5a);
          },
          commit: () => w.commit(),
          discard: () => w.discard(),
        };
      },
    };
    const { job, comms } = await meshComms(dir, () => scribbling);
    await Promise.all(comms.map((c) => c.checkpoint(bigState(c.rank), bytesCodec)));
    await Promise.all(comms.map((c) => c.finalize()));
    // 3 buddy copies of 3 MiB + 413 bytes each, in pieces no larger than one TLS record.
    expect(pieces.reduce((a, b) => a + b, 0)).toBe(3 * (3 * 1048576 + 333 + 80));
    expect(Math.max(...pieces)).toBeLessThanOrEqual(16384);
    expect(pieces.length).toBeGreaterThan(3 * 4 * 8);
    for (let r = 0; r < 3; r++) {
      const served = (r + 2) % 3;
      const own = readFileSync(join(dir, `host-${served}`, job.jobHex, '1', `rank-${served}.ckpt`));
      const buddy = readFileSync(join(dir, `host-${r}`, job.jobHex, '1', `rank-${served}.ckpt.buddy`));
      expect(buddy.equals(own)).toBe(true);
    }
    // The buddy copies are what a resume reads when the rank files are gone.
    for (let r = 0; r < 3; r++) unlinkSync(join(dir, `host-${r}`, job.jobHex, '1', `rank-${r}.ckpt`));
    const again = await makeTestJob({ size: 3, jobId: job.jobId, keys: job.keys, incarnation: 2 });
    const two = (await meshComms(dir, () => undefined, again)).comms;
    const back = await Promise.all(two.map((c) => c.resume(bytesCodec)));
    expect(back.map((b, r) => Buffer.from(b as Uint8Array).equals(bigState(r)))).toEqual([true, true, true]);
    await Promise.all(two.map((c) => c.finalize()));
  });

  it('a piece writer that fails mid-chunk fails the checkpoint on every rank and leaves no temporary file', async () => {
    const dir = join(root, 'tls-piece-fails');
    let copies = 0;
    const failing: CheckpointStore = {
      ...fileStore,
      begin: async (path) => {
        const w = await fileStore.begin(path);
        return {
          write: (b) => w.write(b),
          copy: (b) => {
            if (++copies >= 40) throw new Error('disk full');
            (w.copy as NonNullable<typeof w.copy>)(b);
          },
          commit: () => w.commit(),
          discard: () => w.discard(),
        };
      },
    };
    const { job, comms } = await meshComms(dir, (r) => (r === 1 ? failing : undefined));
    const settled = await Promise.allSettled(comms.map((c) => c.checkpoint(bigState(c.rank), bytesCodec)));
    await Promise.allSettled(comms.map((c) => c.finalize()));
    const got = codes(settled);
    expect(got[1]).toBe('PLX_SPERLI_CHECKPOINT_IO');
    expect(reasonOf(settled[1] as PromiseSettledResult<unknown>).message).toContain('disk full');
    expect(got.filter((c) => c === 'H1612')).toHaveLength(2);
    const epochDir = join(dir, 'host-1', job.jobHex, '1');
    expect(readdirSync(epochDir).filter((n) => n.endsWith('.tmp'))).toEqual([]);
    expect(existsSync(join(epochDir, 'rank-0.ckpt.buddy'))).toBe(false);
    for (let r = 0; r < 3; r++) expect(existsSync(join(dir, `host-${r}`, job.jobHex, '1', 'COMMIT'))).toBe(false);
  });
});

describe('the disk work of a checkpoint', () => {
  /** A store that counts the durable writes of each COMMIT path and passes everything to fileStore. */
  function countingStore(counts: Map<string, number>): CheckpointStore {
    return {
      ...fileStore,
      write: (path, bytes) => {
        if (path.endsWith('COMMIT')) counts.set(path, (counts.get(path) ?? 0) + 1);
        return fileStore.write(path, bytes);
      },
    };
  }

  it.each<[DirLayout, number]>([
    ['shared', 1],
    ['per-rank', 3],
  ])(
    'in a %s directory the COMMIT is written durably %i time(s) per epoch, and every rank holds it',
    async (layout, writes) => {
      const j = new Job(3, layout);
      const counts = new Map<string, number>();
      const store = countingStore(counts);
      j.stores = () => store;
      await j.checkpoints(2);
      for (const e of [1, 2]) {
        const paths = j.commits(e);
        const total = paths.reduce((n, p) => n + (counts.get(p) ?? 0), 0);
        expect(total).toBe(writes);
        const bytes = paths.map((p) => readFileSync(p));
        for (const b of bytes) expect(b.equals(bytes[0] as Buffer)).toBe(true);
      }
      j.stores = undefined;
      expect(await resumeAll(j)).toEqual([0, 1, 2].map((r) => state(r, 2)));
    },
  );

  const big = (rank: number): Uint8Array => {
    const b = new Uint8Array(3 * 1048576 + 333);
    for (let i = 0; i < b.length; i += 97) b[i] = (i + rank * 13) & 255;
    return b;
  };

  it('a buddy copy goes to a piece writer that has no writev one chunk at a time, with the same bytes', async () => {
    const j = new Job(3, 'per-rank');
    const plain: CheckpointStore = {
      ...fileStore,
      begin: async (path) => {
        const w = await fileStore.begin(path);
        return { write: (b) => w.write(b), commit: () => w.commit(), discard: () => w.discard() };
      },
    };
    j.stores = () => plain;
    await j.run((c) => c.checkpoint(big(c.rank), bytesCodec));
    for (let r = 0; r < 3; r++) {
      const [own, buddy] = j.copies(r, 1);
      expect(readFileSync(buddy).equals(readFileSync(own))).toBe(true);
    }
    j.stores = undefined;
    const back = await j.run((c) => c.resume(bytesCodec));
    expect(back.map((b, r) => Buffer.from(b as Uint8Array).equals(big(r)))).toEqual([true, true, true]);
  });

  it('a buddy copy whose disk write fails fails the checkpoint on every rank and leaves no temporary file', async () => {
    const j = new Job(3, 'per-rank');
    await j.checkpoints(1);
    const failing: CheckpointStore = {
      ...fileStore,
      begin: async (path) => {
        const w = await fileStore.begin(path);
        let n = 0;
        const fail = async () => {
          if (++n >= 2) throw new Error('disk full');
        };
        return {
          write: async (b) => {
            await fail();
            return w.write(b);
          },
          writev: async (parts) => {
            await fail();
            return (w.writev as NonNullable<typeof w.writev>)(parts);
          },
          commit: () => w.commit(),
          discard: () => w.discard(),
        };
      },
    };
    j.stores = (rank) => (rank === 1 ? failing : undefined);
    const { comms, settled } = await j.settle(async (c) => {
      await c.resume(bytesCodec);
      return c.checkpoint(big(c.rank), bytesCodec);
    });
    const got = codes(settled);
    expect(got[1]).toBe('PLX_SPERLI_CHECKPOINT_IO');
    expect(reasonOf(settled[1] as PromiseSettledResult<unknown>).message).toContain('disk full');
    expect(got.filter((c) => c === 'H1612')).toHaveLength(2);
    expect(comms[0]?.failed?.details).toMatchObject({ abortReason: 5 });
    expect(readdirSync(j.epochDir(1, 2)).filter((n) => n.endsWith('.tmp'))).toEqual([]);
    expect(existsSync(j.file(1, 2, 'rank-0.ckpt.buddy'))).toBe(false);
    for (let r = 0; r < 3; r++) expect(existsSync(j.file(r, 2, 'COMMIT'))).toBe(false);
    j.stores = undefined;
    expect(await resumeAll(j)).toEqual([0, 1, 2].map((r) => state(r, 1)));
  });
});
