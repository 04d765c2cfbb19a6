/**
 * The receiving relay mailbox of one provisioned actor: it picks messages up from the actor's
 * mediator (Message Pickup 3.0, in batches), runs each through the admission pipeline, and
 * acknowledges it to the mediator only once its outcome is durable: the turn that processed it is
 * journaled, or it was dropped as a duplicate, or its refusal is recorded in the inbound log. A
 * crash anywhere before the acknowledgement makes the mediator deliver the message again, and the
 * second delivery is deduplicated: redelivery, never loss.
 */

import type { Admission, AdmissionOutcome, AdmittingActor } from '../admission.js';
import type { PickedUp, PickupClient } from '../pickup/client.js';

export interface PumpResult {
  /** Messages picked up. */
  readonly picked: number;
  readonly admitted: number;
  readonly refused: number;
  /** Mediator ids acknowledged. */
  readonly acknowledged: readonly string[];
}

export interface RelayMailboxOptions {
  /** Messages per delivery-request (default 50). */
  readonly batch?: number;
  /** Called with the ids about to be acknowledged, after their outcomes are durable (tests, metrics). */
  readonly beforeAcknowledge?: (ids: readonly string[]) => void | Promise<void>;
  /** Observes each outcome. */
  readonly onOutcome?: (o: AdmissionOutcome, picked: PickedUp) => void;
}

export class RelayMailbox {
  private running?: Promise<void>;
  private stopRequested = false;

  constructor(
    readonly actor: AdmittingActor,
    readonly client: PickupClient,
    private readonly admission: Admission,
    private readonly opts: RelayMailboxOptions = {},
  ) {}

  /** Asks the mediator for mediation and registers the actor's DID with it. */
  async connect(): Promise<void> {
    await this.client.requestMediation();
    await this.client.addRecipients([this.actor.did]);
  }

  /**
   * One round: fetch a batch, admit each message in order, acknowledge those whose outcome is
   * durable. A message whose outcome could not be made durable (the node stopping, a failed
   * journal append) is not acknowledged, and the round stops there with that error.
   */
  async pump(): Promise<PumpResult> {
    const batch = await this.client.fetch(this.opts.batch ?? 50);
    const done: string[] = [];
    let admitted = 0;
    let refused = 0;
    let failure: unknown;
    for (const m of batch) {
      try {
        const o = await this.admission.receive(this.actor, m.envelope);
        if (o.kind === 'admitted') admitted++;
        else refused++;
        this.opts.onOutcome?.(o, m);
        done.push(m.id);
      } catch (e) {
        failure = e;
        break;
      }
    }
    if (done.length > 0) {
      await this.opts.beforeAcknowledge?.(done);
      await this.client.acknowledge(done);
    }
    if (failure !== undefined) throw failure;
    return { picked: batch.length, admitted, refused, acknowledged: done };
  }

  /** Pumps until the mediator holds nothing for the actor; returns the rounds' totals. */
  async drain(): Promise<PumpResult> {
    let picked = 0;
    let admitted = 0;
    let refused = 0;
    const acknowledged: string[] = [];
    for (;;) {
      const r = await this.pump();
      picked += r.picked;
      admitted += r.admitted;
      refused += r.refused;
      acknowledged.push(...r.acknowledged);
      if (r.picked === 0) return { picked, admitted, refused, acknowledged };
    }
  }

  /** Polls every `intervalMs` until `stop()`; errors go to `onError` and polling goes on. */
  start(intervalMs = 1000, onError: (e: unknown) => void = () => {}): void {
    if (this.running !== undefined) return;
    this.stopRequested = false;
    this.running = (async () => {
      while (!this.stopRequested) {
        try {
          const r = await this.pump();
          if (r.picked > 0) continue;
        } catch (e) {
          onError(e);
        }
        await new Promise((r) => setTimeout(r, intervalMs));
      }
    })();
  }

  async stop(): Promise<void> {
    this.stopRequested = true;
    await this.running;
    this.running = undefined;
  }
}
