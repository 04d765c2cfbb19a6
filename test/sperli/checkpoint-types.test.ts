/**
 * A state that holds a socket, a file handle, the communicator, a request or a function
 * has no checkpoint: `comm.checkpoint` and `comm.resume` refuse it at compile time. The
 * `@ts-expect-error` lines below are checked by the type check of `npm test`
 * (`tsc -p tsconfig.json --noEmit`): if one of them compiled, the check would fail.
 */
import type { FileHandle } from 'node:fs/promises';
import type { Server, Socket } from 'node:net';
import { describe, expect, expectTypeOf, it } from 'vitest';
import type { Checkpointable, CheckpointState } from '../../ts/sperli/checkpoint.js';
import type { Comm, Request } from '../../ts/sperli/comm.js';

interface Plain {
  step: number;
  name: string;
  big: bigint;
  flags: readonly boolean[];
  pair: [number, string];
  when: Date;
  bytes: Uint8Array;
  floats: Float64Array;
  byName: Map<string, number[]>;
  seen: ReadonlySet<bigint>;
  nested: { deeper?: { value: number | null } };
}

interface Tree {
  label: string;
  children: Tree[];
}

class WithMethod {
  n = 1;
  twice(): number {
    return this.n * 2;
  }
}

const codecOf = <T>(): Checkpointable<T> => ({
  encode: () => new Uint8Array(0),
  decode: () => undefined as T,
});

/** Never called: only compiled. */
function compileOnly(comm: Comm, socket: Socket, file: FileHandle, server: Server, req: Request<void>): void {
  // Plain data is accepted, recursive types too.
  void comm.checkpoint({} as Plain, codecOf<Plain>());
  void comm.resume(codecOf<Plain>());
  void comm.checkpoint({ label: 'root', children: [] }, codecOf<Tree>());
  void comm.resume(codecOf<Tree>());
  void comm.checkpoint(new Uint8Array(4), codecOf<Uint8Array>());
  void comm.checkpoint(42, codecOf<number>());

  // @ts-expect-error a state holding a socket has no checkpoint
  void comm.checkpoint({ step: 1, conn: socket }, codecOf<{ step: number; conn: Socket }>());
  // @ts-expect-error a state holding a socket cannot be resumed either
  void comm.resume(codecOf<{ step: number; conn: Socket }>());
  // @ts-expect-error an open file handle
  void comm.checkpoint({ log: file }, codecOf<{ log: FileHandle }>());
  // @ts-expect-error an open file handle, on resume
  void comm.resume(codecOf<{ log: FileHandle }>());
  // @ts-expect-error a listening server
  void comm.checkpoint({ server }, codecOf<{ server: Server }>());
  // @ts-expect-error the communicator itself
  void comm.checkpoint({ comm }, codecOf<{ comm: Comm }>());
  // @ts-expect-error an isend/irecv request
  void comm.checkpoint({ pending: [req] }, codecOf<{ pending: Request<void>[] }>());
  // @ts-expect-error a function
  void comm.checkpoint({ step: 1, next: () => 2 }, codecOf<{ step: number; next: () => number }>());
  // @ts-expect-error an object with methods
  void comm.checkpoint(new WithMethod(), codecOf<WithMethod>());
  // @ts-expect-error a pending promise
  void comm.checkpoint({ later: Promise.resolve(1) }, codecOf<{ later: Promise<number> }>());
  // @ts-expect-error a socket deep inside a Map
  void comm.checkpoint({ peers: new Map<string, Socket>() }, codecOf<{ peers: Map<string, Socket> }>());
  // @ts-expect-error a socket that may be there
  void comm.checkpoint({ conn: null }, codecOf<{ conn: Socket | null }>());
  // @ts-expect-error an optional socket, on resume
  void comm.resume(codecOf<{ conn?: Socket }>());
}

describe('CheckpointState', () => {
  it('keeps plain data and maps handles, sockets, files and functions to never', () => {
    expectTypeOf<CheckpointState<Plain>>().toEqualTypeOf<{
      step: number;
      name: string;
      big: bigint;
      flags: readonly boolean[];
      pair: [number, string];
      when: Date;
      bytes: Uint8Array;
      floats: Float64Array;
      byName: ReadonlyMap<string, number[]>;
      seen: ReadonlySet<bigint>;
      nested: { deeper?: { value: number | null } };
    }>();
    expectTypeOf<CheckpointState<{ conn: Socket; n: number }>>().toEqualTypeOf<{ conn: never; n: number }>();
    expectTypeOf<CheckpointState<{ log: FileHandle }>>().toEqualTypeOf<{ log: never }>();
    expectTypeOf<CheckpointState<Comm>>().toBeNever();
    expectTypeOf<CheckpointState<Request<number>>>().toBeNever();
    expectTypeOf<CheckpointState<() => void>>().toBeNever();
    expectTypeOf<CheckpointState<{ conn: Socket | null }>>().toEqualTypeOf<{ conn: null }>();
    expect(typeof compileOnly).toBe('function');
  });
});
