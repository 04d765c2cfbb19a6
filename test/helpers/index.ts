/**
 * The test kit (docs/testing.md): one way to wait, to expect a refusal, to hold time, to start
 * processes from `dist/`, and to pick ports.
 */
export * from './clock.js';
export * from './paths.js';
export * from './ports.js';
export * from './processes.js';
export * from './refusal.js';
export * from './until.js';
