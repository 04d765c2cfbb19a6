// The store's own CPU time per append, in process, without gRPC:
// `node bench/chronacta/store-cost.mjs [ROOT]` (ROOT/dist, default: this checkout).
//
// Opens an EventStore (fsync never: the disk is left out) and runs 64 closed loops of
// appends of 1 and of 100 events of 100 bytes, each loop on its own stream. A build with
// the wire codec (dist/chronacta/wire.js) is driven as the gRPC server drives it: the
// request bytes (encoded once per loop by protobufjs) are decoded and handed to
// `appendWire`; an older build gets `append` with the event objects. Prints the CPU time
// per event of the two rounds after a warm-up round.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(process.argv[2] ?? join(dirname(fileURLToPath(import.meta.url)), '../..'));
const { EventStore } = await import(join(root, 'dist/chronacta/store.js'));
const proto = await import(join(root, 'dist/chronacta/proto.js'));
const wire = await import(join(root, 'dist/chronacta/wire.js')).catch(() => undefined);
const def = wire && proto.methodDefinition ? proto.methodDefinition('EventStore', 'Append') : undefined;
const payload = Buffer.alloc(100, 0x61);
for (const batch of [1, 100]) {
  const dir = mkdtempSync(join(tmpdir(), 'plexus-chronacta-store-cost-'));
  const store = await EventStore.open({ dataDir: dir, fsync: 'never', logger: { warn() {} } });
  const events = Array.from({ length: batch }, () => ({ type: 'bench', data: payload }));
  const calls = batch === 1 ? 20_000 : 1000;
  for (let round = 0; round < 3; round++) {
    let left = calls;
    const c0 = process.cpuUsage();
    await Promise.all(
      Array.from({ length: 64 }, async (_, i) => {
        const stream = `s-${round}-${i}`;
        const bytes = def?.requestSerialize({ stream, events });
        while (left-- > 0) {
          if (bytes) await store.appendWire(wire.decodeAppendRequest(bytes));
          else await store.append(stream, events);
        }
      }),
    );
    const c = process.cpuUsage(c0);
    if (round > 0) {
      console.log(
        JSON.stringify({
          path: def ? 'appendWire' : 'append',
          batch,
          cpuUsPerEvent: Number(((c.user + c.system) / (calls * batch)).toFixed(2)),
        }),
      );
    }
  }
  await store.close();
  rmSync(dir, { recursive: true, force: true });
}
