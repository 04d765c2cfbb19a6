import type { Command } from './command.js';

/**
 * The subcommands, each loaded only when it runs (so a command, and its help or usage error, does
 * not pay for loading the others). `summary` repeats the command's own (a test compares them).
 */
export interface CommandEntry {
  readonly name: string;
  readonly summary: string;
  load(): Promise<Command>;
}

export const commands: readonly CommandEntry[] = [
  {
    name: 'demo',
    summary: 'a short guided tour of plexus on embedded defaults (no services needed)',
    load: async () => (await import('./commands/demo.js')).demo,
  },
  {
    name: 'shard',
    summary: 'print the shard of actor IRIs (shard hash version 1)',
    load: async () => (await import('./commands/shard.js')).shard,
  },
  {
    name: 'hash',
    summary: 'digest files with the core kernels (sha256, crc32c)',
    load: async () => (await import('./commands/hash.js')).hash,
  },
  {
    name: 'sperli',
    summary: 'run an MPI-like job over mutual TLS 1.3 (sperli launch)',
    load: async () => (await import('./commands/sperli.js')).sperli,
  },
  {
    name: 'chronacta',
    summary: 'the event store: serve, verify, append, read, subscribe, cluster',
    load: async () => (await import('./commands/chronacta.js')).chronacta,
  },
  {
    name: 'federation',
    summary: 'federation across trust boundaries: the DIDComm mediator',
    load: async () => (await import('./commands/federation.js')).federation,
  },
  {
    name: 'cluster',
    summary:
      'run and inspect a cluster of actor nodes (init, node, status, leases, leave, dead-letters, reshard, client-cert; membership static, etcd, kubernetes or gossip)',
    load: async () => (await import('./commands/cluster.js')).cluster,
  },
];
