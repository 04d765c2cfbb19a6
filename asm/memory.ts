/** First byte the TypeScript arena may use (16-byte aligned, after static data). */
export function heapBase(): usize {
  return (__heap_base + 15) & ~(<usize>15);
}
