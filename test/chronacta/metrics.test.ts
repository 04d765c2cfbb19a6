/**
 * The metrics endpoint on its own port: /metrics (prom-client), /healthz and /readyz,
 * with the counters and histograms of appends, reads, fsyncs and subscriptions.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { until } from '../helpers/until.js';
import { serve, tempDir } from './helpers.js';

let tmp: { dir: string; remove: () => Promise<void> };
beforeAll(async () => {
  tmp = await tempDir('metrics');
});
afterAll(async () => {
  await tmp?.remove();
});

function metric(text: string, name: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `) || (l.startsWith(`${name}{`) && l.includes('} ')));
  if (!line) throw new Error(`no metric ${name} in:\n${text}`);
  return Number(line.slice(line.lastIndexOf(' ') + 1));
}

describe('metrics and health', () => {
  it('serves /metrics, /healthz and /readyz on the metrics port', async () => {
    const run = await serve(join(tmp.dir, 'a'), { metricsPort: 0 });
    try {
      const base = `http://${run.server.metricsAddress}`;
      expect(run.server.metricsAddress).not.toBe(run.server.address);
      const c = run.client;
      await c.append('m', [{ type: 't' }, { type: 't' }]);
      await c.append('m', [{ type: 't' }], { expectedVersion: 'no_stream' }).catch(() => {});
      await c.readStream('m');
      await c.readAll();
      const sub = c.subscribe({ all: true });
      const it = sub[Symbol.asyncIterator]();
      await it.next();
      await it.next();
      await until(() => run.server.subscriptions().length === 1, { what: 'run.server.subscriptions().length === 1' });
      const text = await (await fetch(`${base}/metrics`)).text();
      expect(metric(text, 'chronacta_appends_total{outcome="ok"}')).toBe(1);
      expect(metric(text, 'chronacta_appended_events_total')).toBe(2);
      expect(metric(text, 'chronacta_append_duration_seconds_count')).toBe(1);
      expect(metric(text, 'chronacta_reads_total{kind="stream"}')).toBe(1);
      expect(metric(text, 'chronacta_reads_total{kind="all"}')).toBeGreaterThanOrEqual(1);
      expect(metric(text, 'chronacta_log_fsyncs_total')).toBeGreaterThanOrEqual(1);
      expect(metric(text, 'chronacta_subscriptions_active')).toBe(1);
      expect(metric(text, 'chronacta_subscriptions_total')).toBe(1);
      expect(metric(text, 'chronacta_last_position')).toBe(2);
      expect(metric(text, 'chronacta_cluster_leader')).toBe(1);
      expect(text).toContain('chronacta_grpc_requests_total{method="Append",code="FAILED_PRECONDITION"} 1');
      expect(text).toContain('# TYPE chronacta_read_duration_seconds histogram');
      sub.close();

      const health = await fetch(`${base}/healthz`);
      expect(health.status).toBe(200);
      const ready = await fetch(`${base}/readyz`);
      expect(ready.status).toBe(200);
      const body = (await ready.json()) as { status: string; checks: Record<string, { ok: boolean }> };
      expect(body.status).toBe('ready');
      expect(Object.keys(body.checks).sort()).toEqual(['disk', 'space', 'wal']);
      // The readiness check fsynced a probe file and timed it.
      const after = await (await fetch(`${base}/metrics`)).text();
      expect(metric(after, 'chronacta_fsync_duration_seconds_count')).toBeGreaterThanOrEqual(1);
      expect((await fetch(`${base}/nope`)).status).toBe(404);
    } finally {
      await run.stop();
    }
  });

  it('is not ready when the disk is short of space', async () => {
    const run = await serve(join(tmp.dir, 'b'), { metricsPort: 0, minFreeBytes: Number.MAX_SAFE_INTEGER });
    try {
      const r = await fetch(`http://${run.server.metricsAddress}/readyz`);
      expect(r.status).toBe(503);
      const body = (await r.json()) as { checks: Record<string, { ok: boolean; detail?: string }> };
      expect(body.checks.space?.ok).toBe(false);
      expect(body.checks.wal?.ok).toBe(true);
    } finally {
      await run.stop();
    }
  });
});
