// Runs `plexus federation ...` in a child process for test/federation/mediator-process.test.ts:
//   node mediator-child.mjs COMMAND_MODULE ARGS...
// COMMAND_MODULE is the URL of ts/cli/commands/federation.ts compiled to JavaScript. Exit codes
// and error lines are ts/cli/main.ts's (failureReport in ts/cli/command.ts).
const [moduleUrl, ...args] = process.argv.slice(2);
const { federation } = await import(moduleUrl);
const { failureReport } = await import(new URL('../command.js', moduleUrl).href);
try {
  process.exitCode = await federation.run(args);
} catch (err) {
  const r = failureReport(err);
  process.stderr.write(r.text);
  process.exitCode = r.exitCode;
}
