// The plexus WebAssembly core: one module, every kernel of plexus/core.
// Kernels never allocate: the TypeScript arena (ts/core/arena.ts) owns all memory
// from heapBase() upwards and passes pointers in.
export { heapBase } from './memory';
export * from './fnv1a';
export * from './crc32c';
export * from './sha256';
export * from './reduce';
export * from './header';
