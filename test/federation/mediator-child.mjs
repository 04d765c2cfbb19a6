// Runs `plexus federation ...` in a child process for test/federation/mediator-process.test.ts:
//   node mediator-child.mjs COMMAND_MODULE ARGS...
// COMMAND_MODULE is the URL of ts/cli/commands/federation.ts compiled to JavaScript. Exit codes
// and error lines follow ts/cli/main.ts: 2 for a usage error, 1 with "error CODE: message" for a
// PlexusError.
const [moduleUrl, ...args] = process.argv.slice(2);
const { federation } = await import(moduleUrl);
try {
  process.exitCode = await federation.run(args);
} catch (err) {
  if (err?.name === 'UsageError') {
    process.stderr.write(`plexus: ${err.message}\n(see plexus federation --help)\n`);
    process.exitCode = 2;
  } else if (err?.name === 'PlexusError') {
    process.stderr.write(`plexus: error ${err.code}: ${err.message}\n`);
    process.exitCode = 1;
  } else {
    process.stderr.write(`plexus: unexpected failure: ${err?.stack ?? err}\n`);
    process.exitCode = 1;
  }
}
