/**
 * The scenario-script runner: test/raft/testdata/*.txt hold commands, each followed by `----`
 * and the output it must produce (the trace of Readies, messages and results), then a blank
 * line. Lines starting with `#` are comments. With RAFT_REWRITE=1 the runner writes the
 * actual output back into the file, to be reviewed in the diff.
 *
 * Commands:
 *   add-nodes <n> [prevote] [checkquorum] [election=<ticks>] [heartbeat=<ticks>] [inflight=<n>] [size=<bytes>]
 *       the first call makes n founding voters 1..n; later calls add empty nodes that join by conf change
 *   campaign <id> | tick <id> [n] | tick-election <id> | tick-heartbeat <id>
 *   process-ready <id> | deliver-msgs [<id>] | stabilize
 *   propose <id> <text> | propose-conf-change <id> add-voter|add-learner|remove-node <node>
 *   transfer-leader <from> <to> | read-index <id> <ctx> | compact <id> <index>
 *   isolate <id> | cut <a> <b> | heal | crash <id> | restart <id>
 *   status <id> | raft-log <id> | applied <id>
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { expect } from 'vitest';
import { bytes, fmtEntry, type NodeOptions, TestCluster } from './harness.js';

interface Block {
  readonly pre: string[];
  readonly cmd: string;
  readonly expected: string[];
}

export function parseScript(text: string): Block[] {
  const lines = text.split('\n');
  const blocks: Block[] = [];
  let pre: string[] = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i]!;
    if (line.trim() === '' || line.startsWith('#')) {
      if (line.startsWith('#')) pre.push(line);
      i++;
      continue;
    }
    const cmd = line;
    i++;
    if (lines[i] !== '----') throw new Error(`line ${i + 1}: expected ---- after "${cmd}"`);
    i++;
    const expected: string[] = [];
    while (i < lines.length && lines[i] !== '') expected.push(lines[i++]!);
    blocks.push({ pre, cmd, expected });
    pre = [];
  }
  return blocks;
}

function num(s: string | undefined, what: string): number {
  const n = Number(s);
  if (!Number.isInteger(n)) throw new Error(`${what}: not a number: ${s}`);
  return n;
}

export class Interaction {
  cluster: TestCluster | undefined;

  private c(): TestCluster {
    if (!this.cluster) throw new Error('add-nodes first');
    return this.cluster;
  }

  run(cmd: string): string[] {
    const [name, ...args] = cmd.trim().split(/\s+/);
    const out: string[] = [];
    const attempt = (f: () => void) => {
      const err = TestCluster.attempt(f);
      if (err) out.push(`error: ${err}`);
    };
    switch (name) {
      case 'add-nodes': {
        const n = num(args[0], 'add-nodes');
        if (!this.cluster) {
          const opts: Record<string, unknown> = {};
          for (const a of args.slice(1)) {
            const [k, v] = a.split('=');
            if (k === 'prevote') opts.preVote = true;
            else if (k === 'checkquorum') opts.checkQuorum = true;
            else if (k === 'election') opts.electionTick = num(v, k);
            else if (k === 'heartbeat') opts.heartbeatTick = num(v, k);
            else if (k === 'inflight') opts.maxInflight = num(v, k);
            else if (k === 'size') opts.maxSizePerMsg = num(v, k);
            else throw new Error(`add-nodes: unknown option ${a}`);
          }
          this.cluster = new TestCluster(n, opts as NodeOptions);
          out.push(`founding voters ${[...this.cluster.nodes.keys()].join(',')}`);
        } else {
          const first = Math.max(...this.cluster.nodes.keys()) + 1;
          for (let id = first; id < first + n; id++) this.cluster.add(id);
          out.push(`empty nodes ${Array.from({ length: n }, (_, k) => first + k).join(',')}`);
        }
        break;
      }
      case 'campaign':
        this.c().get(num(args[0], name)).campaign();
        break;
      case 'tick':
        this.c().tick(num(args[0], name), args[1] ? num(args[1], name) : 1);
        break;
      case 'tick-election': {
        const id = num(args[0], name);
        // 2 * electionTick always passes the randomized timeout.
        this.c().tick(id, 2 * (this.c().opts.electionTick ?? 10));
        break;
      }
      case 'tick-heartbeat':
        this.c().tick(num(args[0], name), this.c().opts.heartbeatTick ?? 1);
        break;
      case 'process-ready':
        this.c().processReady(num(args[0], name));
        break;
      case 'deliver-msgs':
        this.c().deliver(args[0] ? num(args[0], name) : undefined);
        break;
      case 'stabilize':
        this.c().stabilize();
        break;
      case 'propose':
        attempt(() => {
          const p = this.c()
            .get(num(args[0], name))
            .propose(bytes(args.slice(1).join(' ')));
          out.push(`proposed at ${p.term}/${p.index}`);
        });
        break;
      case 'propose-conf-change':
        attempt(() => {
          const type = args[1] as 'add-voter' | 'add-learner' | 'remove-node';
          const p = this.c()
            .get(num(args[0], name))
            .proposeConfChange({ type, nodeId: num(args[2], name) });
          out.push(`proposed at ${p.term}/${p.index}`);
        });
        break;
      case 'transfer-leader':
        attempt(() => this.c().get(num(args[0], name)).transferLeader(num(args[1], name)));
        break;
      case 'read-index':
        attempt(() =>
          this.c()
            .get(num(args[0], name))
            .readIndex(bytes(args[1] ?? '')),
        );
        break;
      case 'compact': {
        const id = num(args[0], name);
        attempt(() => {
          const t = this.c().nodes.get(id)!;
          const snap = this.c()
            .get(id)
            .compact(num(args[1], name), bytes(`state@${args[1]}`));
          t.storage.compact(snap);
          out.push(`compacted to ${snap.metadata.term}/${snap.metadata.index}`);
        });
        break;
      }
      case 'isolate':
        this.c().isolate(num(args[0], name));
        break;
      case 'cut':
        this.c().cutLink(num(args[0], name), num(args[1], name));
        break;
      case 'heal':
        this.c().heal();
        break;
      case 'crash':
        this.c().crash(num(args[0], name));
        break;
      case 'restart':
        this.c().restart(num(args[0], name));
        break;
      case 'status': {
        const s = this.c().get(num(args[0], name)).status();
        out.push(
          `${s.id}: ${s.role} term=${s.term} vote=${s.vote} lead=${s.lead} commit=${s.commit} applied=${s.applied} last=${s.lastIndex}`,
        );
        out.push(`  voters=${s.confState.voters.join(',')} learners=${s.confState.learners.join(',')}`);
        if (s.progress) {
          for (const [id, p] of [...s.progress].sort((a, b) => a[0] - b[0])) {
            out.push(`  ${id}: ${p.state} match=${p.match} next=${p.next}${p.learner ? ' learner' : ''}`);
          }
        }
        break;
      }
      case 'raft-log': {
        const st = this.c().nodes.get(num(args[0], name))!.storage;
        const first = st.firstIndex();
        const last = st.lastIndex();
        out.push(`snapshot ${st.snapshot().metadata.term}/${st.snapshot().metadata.index}`);
        if (last >= first) for (const e of st.entries(first, last + 1)) out.push(fmtEntry(e));
        break;
      }
      case 'applied':
        out.push(this.c().appliedText(num(args[0], name)).join(' ') || '(none)');
        break;
      default:
        throw new Error(`unknown command ${name}`);
    }
    return [...this.c().takeOutput(), ...out];
  }
}

/** Runs one script file; returns mismatches, or rewrites the file when RAFT_REWRITE=1. */
export function runScript(path: string): void {
  const blocks = parseScript(readFileSync(path, 'utf8'));
  const it = new Interaction();
  const rewrite = process.env.RAFT_REWRITE === '1';
  const outText: string[] = [];
  for (const b of blocks) {
    const actual = it.run(b.cmd);
    if (actual.length === 0) actual.push('ok');
    outText.push(...b.pre, b.cmd, '----', ...actual, '');
    if (!rewrite) expect(actual, `${path}: ${b.cmd}`).toEqual(b.expected);
  }
  if (rewrite) writeFileSync(path, `${outText.join('\n').replace(/\n+$/, '')}\n`);
}
