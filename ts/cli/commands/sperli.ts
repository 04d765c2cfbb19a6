import { existsSync, statSync } from 'node:fs';
import { PlexusError } from '../../core/errors.js';
import { launch, readHostsFile } from '../../sperli/launcher.js';
import { type Command, parse, UsageError } from '../command.js';

const HELP = [
  'Usage: plexus sperli launch -n N [options] -- PROGRAM [ARGS...]',
  '',
  'Starts a SPERLI job of N ranks, each running PROGRAM, connected by mutually',
  'authenticated TLS 1.3. Each rank gets its job description on standard input (one',
  'hex line; `init()` from plexus/sperli reads it). Output is forwarded with a',
  '[rank n] prefix. The exit status is 0 when every rank exits 0 and every rank',
  'that called init() left with finalize(); when a rank fails, is lost (a rank that',
  'exits 0 without finalize() is lost too: it said no BYE) or the job aborts, every',
  'rank is stopped and the status is 1, with the rank, the reason and its H-code.',
  '',
  'Options:',
  '  -n, --np N           number of ranks (default: the number of hosts in --hosts)',
  '      --hosts FILE     one host[:port] per rank; without it every rank runs here',
  '                       (127.0.0.x addresses count as distinct hosts)',
  '      --deny-hosts FILE  more hosts that must never run a rank (one per line), added',
  '                       to SPERLI_REFUSED_HOSTS and the reserved host-a/host-b.invalid;',
  '                       FILE must exist (PLX_SPERLI_DENY_FILE)',
  '      --silence-ms N   a peer silent this long is lost (default 5000)',
  '      --remote CMD     how to start a rank on another host, {host} replaced,',
  "                       e.g. --remote 'ssh {host}'",
  '      --checkpoint-dir DIR  where ranks keep checkpoints (comm.checkpoint/resume)',
  '      --restart-max N  start a failed job again, at most N times, as the next',
  '                       incarnation (same job id and keys); it resumes from its',
  '                       last COMMIT. A lost rank moves to a spare host when the',
  '                       hosts file lists more hosts than ranks (default 0)',
  '      --spin-ms MS     how long a rank waiting for a message polls before it',
  '                       sleeps, 0..1000 ms (default: 1 when the ranks on a machine',
  '                       fit its cores, else 0; SPERLI_SPIN_MS sets it too)',
  '      --json           print the result as JSON on the last line',
  '',
  "Exit status: the job's (above); before the job starts, 1 for a refused input",
  '(PLX_SPERLI_LAUNCH, PLX_SPERLI_DENY_FILE, ...) and 2 for a usage mistake.',
  '',
  'Example:',
  '  plexus sperli launch -n 4 -- node examples/sperli/pi.mjs',
].join('\n');

function spinMs(v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  if (!/^\d+(\.\d+)?$/.test(v) || Number(v) > 1000) {
    throw new UsageError('sperli', `--spin-ms takes a number of milliseconds from 0 to 1000, got "${v}"`);
  }
  return Number(v);
}

export const sperli: Command = {
  name: 'sperli',
  summary: 'run an MPI-like job over mutual TLS 1.3 (sperli launch)',
  help: HELP,
  async run(args) {
    const [sub, ...rest] = args;
    if (sub !== 'launch')
      throw new UsageError('sperli', sub ? `unknown subcommand "${sub}"` : 'missing subcommand: launch');
    const dd = rest.indexOf('--');
    const own = dd >= 0 ? rest.slice(0, dd) : rest;
    const command = dd >= 0 ? rest.slice(dd + 1) : [];
    const { values, positionals } = parse('sperli', {
      args: own,
      allowPositionals: true,
      options: {
        np: { type: 'string', short: 'n' },
        hosts: { type: 'string' },
        'deny-hosts': { type: 'string' },
        'silence-ms': { type: 'string' },
        remote: { type: 'string' },
        'checkpoint-dir': { type: 'string' },
        'restart-max': { type: 'string' },
        'spin-ms': { type: 'string' },
        json: { type: 'boolean' },
      },
    });
    if (positionals.length > 0 && command.length === 0) {
      throw new UsageError('sperli', `put the program after --: plexus sperli launch -n N -- ${positionals.join(' ')}`);
    }
    if (command.length === 0) throw new UsageError('sperli', 'give the program to run after --');
    const num = (name: string, v: string | undefined) => {
      if (v === undefined) return undefined;
      if (!/^\d+$/.test(v)) throw new UsageError('sperli', `--${name} takes a whole number, got "${v}"`);
      return Number(v);
    };
    // A deny list that is not there would refuse nothing: a missing file is an error here (the
    // launcher itself reads a missing file as empty).
    const deny = values['deny-hosts'];
    if (deny !== undefined && !existsSync(deny)) {
      throw new PlexusError('PLX_SPERLI_DENY_FILE', `the deny-hosts file ${deny} does not exist`, { file: deny });
    }
    const ckpt = values['checkpoint-dir'];
    if (ckpt !== undefined && existsSync(ckpt) && !statSync(ckpt).isDirectory()) {
      throw new PlexusError('PLX_SPERLI_LAUNCH', `--checkpoint-dir ${ckpt} is not a directory`, { dir: ckpt });
    }
    const result = await launch({
      size: num('np', values.np),
      command,
      hostsText: values.hosts === undefined ? undefined : readHostsFile(values.hosts),
      denyFile: values['deny-hosts'],
      silenceMs: num('silence-ms', values['silence-ms']),
      remote: values.remote,
      checkpointDir: values['checkpoint-dir'],
      restartMax: num('restart-max', values['restart-max']),
      spinMs: spinMs(values['spin-ms']),
    });
    const f = result.failure;
    if (f) {
      const lost = typeof f.details?.peer === 'number' ? ` (lost rank ${f.details.peer})` : '';
      process.stderr.write(
        `plexus sperli: job ${result.jobId} failed at rank ${f.rank}: ${f.code ? `${f.code} ` : ''}${f.message}${lost}\n`,
      );
    }
    if (values.json) process.stdout.write(`${JSON.stringify(result)}\n`);
    return result.exitCode;
  },
};
