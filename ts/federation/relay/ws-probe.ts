/**
 * Whether a mediator accepts a WebSocket at `url`, found by one opening handshake that is closed
 * at once: `yes` when the upgrade succeeds, `no` when the server answers the upgrade with an HTTP
 * status that is not temporary (a 4xx other than 408 and 429: no WebSocket here), and `unknown`
 * when it cannot be told now (unreachable, timed out, 429 or 5xx while starting or shutting down).
 */
import { WebSocket } from 'ws';
import { heldMonotonicClock, type Timers } from '../../core/clock.js';

export type WebSocketSupport = 'yes' | 'no' | 'unknown';

/** `timers` runs the probe's timeout (default `heldMonotonicClock`). */
export function probeWebSocket(
  url: string,
  timeoutMs: number,
  timers: Timers = heldMonotonicClock,
): Promise<WebSocketSupport> {
  return new Promise((resolve) => {
    let settled = false;
    let ws: WebSocket;
    const done = (r: WebSocketSupport): void => {
      if (settled) return;
      settled = true;
      timers.clearTimeout(timer);
      ws.terminate();
      resolve(r);
    };
    const timer = timers.setTimeout(() => done('unknown'), timeoutMs);
    try {
      ws = new WebSocket(url, { handshakeTimeout: timeoutMs });
    } catch {
      timers.clearTimeout(timer);
      resolve('no');
      return;
    }
    ws.on('open', () => done('yes'));
    ws.on('unexpected-response', (_req, res) => {
      const s = res.statusCode ?? 0;
      res.resume();
      done(s >= 400 && s < 500 && s !== 408 && s !== 429 ? 'no' : 'unknown');
    });
    ws.on('error', () => done('unknown'));
  });
}
