// Ping-pong between rank 0 and rank 1: the round-trip time of small and large messages.
//   plexus sperli launch -n 2 -- node examples/sperli/ping-pong.mjs [ROUNDS]
import { init } from 'plexus/sperli';

const comm = await init();
if (comm.size < 2) throw new Error('ping-pong needs 2 ranks: plexus sperli launch -n 2 -- ...');
const rounds = Number(process.argv[2] ?? 1000);
for (const size of [8, 1 << 20]) {
  const msg = new Uint8Array(size).fill(comm.rank + 1);
  const t0 = performance.now();
  for (let i = 0; i < rounds; i++) {
    if (comm.rank === 0) {
      await comm.send(1, 7, msg);
      await comm.recv(1, 7);
    } else if (comm.rank === 1) {
      const m = await comm.recv(0, 7);
      await comm.send(0, 7, m.data);
    }
  }
  const us = ((performance.now() - t0) / rounds) * 1000;
  if (comm.rank === 0) {
    const mbps = ((2 * size) / (us / 1e6) / 1e6).toFixed(1);
    console.log(`${size} bytes: ${us.toFixed(1)} us per round trip (${mbps} MB/s)`);
  }
}
await comm.finalize();
