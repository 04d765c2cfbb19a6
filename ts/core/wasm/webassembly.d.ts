// The part of the WebAssembly JavaScript API that plexus uses (Node.js, Bun and browsers
// all provide it; TypeScript declares it only in the DOM library).
declare namespace WebAssembly {
  class Module {
    constructor(bytes: BufferSource);
  }
  class Instance {
    constructor(module: Module, imports?: Record<string, Record<string, unknown>>);
    readonly exports: Record<string, unknown>;
  }
  class Memory {
    constructor(descriptor: { initial: number; maximum?: number; shared?: boolean });
    readonly buffer: ArrayBuffer;
    grow(delta: number): number;
  }
  type BufferSource = ArrayBufferView | ArrayBuffer;
}
