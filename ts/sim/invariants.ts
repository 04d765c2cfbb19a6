/**
 * Invariants of a replicated log, checked while a simulation runs. They use plain numbers and
 * strings so any replication protocol can report to them:
 * - at most one leader per term (Raft's Election Safety);
 * - an entry applied anywhere at an index is the entry applied everywhere at that index
 *   (State Machine Safety), and a leader's log holds every applied entry (Leader Completeness);
 * - each node's commit index never decreases, even across restarts;
 * - the application positions that replicas assign never diverge.
 */
export interface Violation {
  readonly rule: string;
  readonly message: string;
  readonly time: number;
}

export class ReplicatedLogInvariants {
  private leaders = new Map<number, number>();
  /** index -> "term:digest" of the entry first applied there. */
  readonly applied = new Map<number, string>();
  private commits = new Map<number, number>();
  /** application position -> value, and back. */
  private positions = new Map<number, string>();
  private valuePositions = new Map<string, number>();
  readonly violations: Violation[] = [];

  private fail(rule: string, message: string, time: number): void {
    if (this.violations.length < 20) this.violations.push({ rule, message, time });
  }

  leader(term: number, node: number, time: number): void {
    const had = this.leaders.get(term);
    if (had !== undefined && had !== node) {
      this.fail('election-safety', `nodes ${had} and ${node} both led term ${term}`, time);
    }
    this.leaders.set(term, node);
  }

  commit(node: number, commit: number, time: number): void {
    const had = this.commits.get(node) ?? 0;
    if (commit < had) this.fail('commit-monotonic', `node ${node} commit went from ${had} to ${commit}`, time);
    this.commits.set(node, Math.max(had, commit));
  }

  appliedEntry(node: number, index: number, term: number, digest: string, time: number): void {
    const key = `${term}:${digest}`;
    const had = this.applied.get(index);
    if (had === undefined) this.applied.set(index, key);
    else if (had !== key) {
      this.fail('state-machine-safety', `node ${node} applied ${key} at ${index}, another node applied ${had}`, time);
    }
  }

  /** A leader's log, as `termAt(i)` for i in [from, to] (undefined where it has no entry). */
  leaderLog(node: number, from: number, termAt: (i: number) => number | undefined, time: number): void {
    for (const [index, key] of this.applied) {
      if (index < from) continue;
      const t = termAt(index);
      const want = Number(key.slice(0, key.indexOf(':')));
      if (t !== want) {
        this.fail(
          'leader-completeness',
          `leader ${node} has term ${t ?? 'none'} at ${index}, but an entry of term ${want} was applied there`,
          time,
        );
        return;
      }
    }
  }

  /** The position some replica gave `value`, if any replica ever applied it. */
  positionOf(value: string): number | undefined {
    return this.valuePositions.get(value);
  }

  position(node: number, position: number, value: string, time: number): void {
    const had = this.positions.get(position);
    if (had === undefined) {
      this.positions.set(position, value);
      this.valuePositions.set(value, position);
    } else if (had !== value) {
      this.fail('replica-divergence', `node ${node} has ${value} at position ${position}, another has ${had}`, time);
    }
  }
}
