/** `plexus chronacta cluster ...`: init, certs, join-files, status, add, remove, promote and transfer. */
import { access, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { checkAddress, type HaMember } from '../../../chronacta/cluster-config.js';
import {
  clusterFiles,
  dataPaths,
  haConfigOf,
  joinFiles,
  makeDataDir,
  prepareDataDir,
  writeClusterFiles,
} from '../../../chronacta/layout.js';
import {
  caPaths,
  checkMemberCertificate,
  createMemberCa,
  issueMemberFiles,
  memberTlsPaths,
  readCa,
  writeCa,
  writeMemberTls,
} from '../../../chronacta/member-tls.js';
import { parse, UsageError } from '../../command.js';
import { CLIENT_FLAGS, DEFAULT_SERVER, num, out, withClient } from './shared.js';

function addressList(name: string, v: string | undefined, n: number): string[] | undefined {
  if (v === undefined) return undefined;
  const list = v.split(',');
  if (list.length !== n) throw new UsageError('chronacta', `--${name} lists ${list.length} addresses for ${n} members`);
  for (const a of list) {
    try {
      checkAddress(`--${name}`, a);
    } catch (e) {
      throw new UsageError('chronacta', (e as Error).message);
    }
  }
  return list;
}

export async function cluster(args: string[]): Promise<number> {
  const [sub, ...rest] = args;
  if (sub === 'init') return clusterInit(rest);
  if (sub === 'status') return clusterStatus(rest);
  if (sub === 'add') return clusterAdd(rest);
  if (sub === 'remove') return clusterRemove(rest);
  if (sub === 'promote') return clusterPromote(rest);
  if (sub === 'transfer') return clusterTransfer(rest);
  if (sub === 'join-files') return clusterJoinFiles(rest);
  if (sub === 'certs') return clusterCerts(rest);
  throw new UsageError(
    'chronacta',
    sub
      ? `unknown cluster subcommand "${sub}"`
      : 'missing cluster subcommand: init, certs, status, join-files, add, remove, promote or transfer',
  );
}

async function clusterInit(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: {
      members: { type: 'string' },
      root: { type: 'string' },
      'base-port': { type: 'string' },
      'cluster-id': { type: 'string' },
      advertise: { type: 'string' },
      raft: { type: 'string' },
      force: { type: 'boolean' },
    },
  });
  if (positionals.length > 0) throw new UsageError('chronacta', `unexpected argument "${positionals[0]}"`);
  const n = num('members', values.members);
  if (n === undefined || n < 1 || n > 64) throw new UsageError('chronacta', 'cluster init needs --members 1 to 64');
  if (!values.root) throw new UsageError('chronacta', 'cluster init needs --root DIR');
  const base = num('base-port', values['base-port']) ?? 2213;
  if (base < 1 || base + 2 * n > 65535) throw new UsageError('chronacta', '--base-port leaves no room for the ports');
  const advertise = addressList('advertise', values.advertise, n);
  const raft = addressList('raft', values.raft, n);
  const members: HaMember[] = Array.from({ length: n }, (_, i) => ({
    id: i + 1,
    advertise: advertise?.[i] ?? `127.0.0.1:${base + 2 * i}`,
    raftAddress: raft?.[i] ?? `127.0.0.1:${base + 2 * i + 1}`,
  }));
  const clusterId = values['cluster-id'] ?? `chronacta-${Date.now().toString(36)}`;
  const dirs = members.map((m) => join(values.root as string, `node-${m.id}`));
  if (!values.force) {
    for (const d of dirs) {
      const exists = await access(dataPaths(d).clusterFile).then(
        () => true,
        () => false,
      );
      if (exists) throw new UsageError('chronacta', `${d} already has cluster files; pass --force to replace them`);
    }
  }
  for (const d of dirs) await makeDataDir(d, dataPaths(d).cluster);
  // The cluster CA at the root (its key signs members added later), a certificate per member.
  const ca = await createMemberCa(clusterId);
  await writeCa(values.root, ca);
  for (let i = 0; i < n; i++) {
    const m = members[i] as HaMember;
    await writeClusterFiles(dirs[i] as string, clusterFiles(clusterId, members, m.id));
    await issueMemberFiles(dirs[i] as string, ca, m.id);
    out({
      id: m.id,
      dataDir: dirs[i],
      advertise: m.advertise,
      raftAddress: m.raftAddress,
      clusterId,
      certificate: memberTlsPaths(dirs[i] as string).cert,
    });
  }
  return 0;
}

async function readGiven(flag: string, file: string): Promise<string> {
  try {
    return await readFile(file, 'utf8');
  } catch (e) {
    throw new UsageError('chronacta', `--${flag} ${file} cannot be read: ${(e as Error).message}`);
  }
}

const exists = (file: string) =>
  access(file).then(
    () => true,
    () => false,
  );

async function clusterCerts(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: { 'ca-dir': { type: 'string' }, data: { type: 'string', multiple: true }, force: { type: 'boolean' } },
  });
  if (positionals.length > 0) throw new UsageError('chronacta', `unexpected argument "${positionals[0]}"`);
  const caDir = values['ca-dir'];
  if (!caDir) throw new UsageError('chronacta', 'cluster certs needs --ca-dir CA');
  const dirs = values.data ?? [];
  if (dirs.length === 0) throw new UsageError('chronacta', 'cluster certs needs --data DIR (one or more)');
  const members: { dir: string; id: number; clusterId: string }[] = [];
  for (const dir of dirs) {
    const ha = haConfigOf(await prepareDataDir(dir));
    if (!values.force && (await exists(memberTlsPaths(dir).cert))) {
      throw new UsageError('chronacta', `${dir} already has a member certificate; pass --force to replace it`);
    }
    members.push({ dir, id: ha.id, clusterId: ha.clusterId });
  }
  const p = caPaths(caDir);
  const haveCa = (await exists(p.cert)) || (await exists(p.key));
  const ca = haveCa ? await readCa(caDir) : await createMemberCa(members[0]?.clusterId ?? 'chronacta');
  if (!haveCa) await writeCa(caDir, ca);
  for (const m of members) {
    await issueMemberFiles(m.dir, ca, m.id);
    out({ id: m.id, dataDir: m.dir, certificate: memberTlsPaths(m.dir).cert, ca: p.cert, caCreated: !haveCa });
  }
  return 0;
}

async function clusterStatus(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: { ...CLIENT_FLAGS },
  });
  if (positionals.length > 0) throw new UsageError('chronacta', `unexpected argument "${positionals[0]}"`);
  const s = await withClient(values, (c) => c.clusterStatus());
  out(s as unknown as Record<string, unknown>);
  return 0;
}

function memberId(v: string | undefined): number {
  if (v === undefined) throw new UsageError('chronacta', 'give the member id with --id N');
  const n = num('id', v) as number;
  if (n < 1 || !Number.isSafeInteger(n)) throw new UsageError('chronacta', '--id takes a whole number from 1');
  return n;
}

function address(name: string, v: string | undefined): string {
  if (v === undefined) throw new UsageError('chronacta', `give --${name} H:P`);
  try {
    checkAddress(`--${name}`, v);
  } catch (e) {
    throw new UsageError('chronacta', (e as Error).message);
  }
  if (Number(v.slice(v.lastIndexOf(':') + 1)) === 0) throw new UsageError('chronacta', `--${name} needs a port from 1`);
  return v;
}

const MEMBER_OPTIONS = {
  ...CLIENT_FLAGS,
  id: { type: 'string' },
  'raft-address': { type: 'string' },
  advertise: { type: 'string' },
} as const;

function newMember(values: { id?: string; 'raft-address'?: string; advertise?: string }): HaMember {
  return {
    id: memberId(values.id),
    raftAddress: address('raft-address', values['raft-address']),
    advertise: address('advertise', values.advertise),
  };
}

async function clusterJoinFiles(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: {
      ...MEMBER_OPTIONS,
      data: { type: 'string' },
      force: { type: 'boolean' },
      'ca-dir': { type: 'string' },
      cert: { type: 'string' },
      key: { type: 'string' },
      ca: { type: 'string' },
    },
  });
  if (positionals.length > 0) throw new UsageError('chronacta', `unexpected argument "${positionals[0]}"`);
  const self = newMember(values);
  if (!values.data) throw new UsageError('chronacta', 'cluster join-files needs --data DIR');
  // The new member's certificate: issued here with the CA key, or signed by the operator.
  const given = [values.cert, values.key, values.ca].filter((v) => v !== undefined).length;
  if ((values['ca-dir'] === undefined) === (given === 0) || (given !== 0 && given !== 3)) {
    throw new UsageError(
      'chronacta',
      "cluster join-files needs the member's certificate: --ca-dir CA (the cluster CA's ca.pem and ca-key.pem), or --cert F --key F --ca F",
    );
  }
  const signed =
    given === 3
      ? {
          cert: await readGiven('cert', values.cert as string),
          key: await readGiven('key', values.key as string),
          ca: await readGiven('ca', values.ca as string),
        }
      : undefined;
  if (signed) checkMemberCertificate(signed, self.id, values.cert);
  const ca = values['ca-dir'] !== undefined ? await readCa(values['ca-dir']) : undefined;
  const dir = values.data;
  if (!values.force) {
    const exists = await access(dataPaths(dir).clusterFile).then(
      () => true,
      () => false,
    );
    if (exists) throw new UsageError('chronacta', `${dir} already has cluster files; pass --force to replace them`);
  }
  const s = await withClient(values, (c) => c.clusterStatus());
  if (s.mode !== 'cluster') {
    throw new UsageError('chronacta', `the server at ${values.server ?? DEFAULT_SERVER} is not a cluster member`);
  }
  const current: HaMember[] = s.members.map((m) => ({
    id: Number(m.id),
    raftAddress: (m as { raftAddress?: string }).raftAddress ?? '',
    advertise: m.address,
  }));
  if (current.some((m) => m.id === self.id)) {
    throw new UsageError('chronacta', `member ${self.id} is already in the cluster; pick another id`);
  }
  for (const m of current) {
    for (const a of [self.raftAddress, self.advertise]) {
      if (a === m.raftAddress || a === m.advertise) {
        throw new UsageError('chronacta', `address ${a} is already used by member ${m.id}`);
      }
    }
  }
  await makeDataDir(dir, dataPaths(dir).cluster);
  await writeClusterFiles(dir, joinFiles(s.clusterId, current, self));
  if (ca) await issueMemberFiles(dir, ca, self.id);
  else await writeMemberTls(dir, signed as { cert: string; key: string; ca: string });
  out({
    id: self.id,
    dataDir: dir,
    advertise: self.advertise,
    raftAddress: self.raftAddress,
    clusterId: s.clusterId,
    certificate: memberTlsPaths(dir).cert,
  });
  return 0;
}

async function clusterAdd(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: { ...MEMBER_OPTIONS, learner: { type: 'boolean' }, 'catch-up-ms': { type: 'string' } },
  });
  if (positionals.length > 0) throw new UsageError('chronacta', `unexpected argument "${positionals[0]}"`);
  const m = newMember(values);
  const catchUpMs = num('catch-up-ms', values['catch-up-ms']);
  if (catchUpMs !== undefined && (catchUpMs < 1 || catchUpMs > 3_600_000)) {
    throw new UsageError('chronacta', '--catch-up-ms takes 1 to 3600000');
  }
  const r = await withClient(values, (c) =>
    c.addMember(m, { learner: values.learner === true, ...(catchUpMs !== undefined ? { catchUpMs } : {}) }),
  );
  out({ added: m.id, learner: values.learner === true, ...r });
  return 0;
}

async function clusterRemove(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: { ...CLIENT_FLAGS, id: { type: 'string' } },
  });
  if (positionals.length > 0) throw new UsageError('chronacta', `unexpected argument "${positionals[0]}"`);
  const id = memberId(values.id);
  const r = await withClient(values, (c) => c.removeMember(id));
  out({ removed: id, ...r });
  return 0;
}

async function clusterPromote(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: { ...CLIENT_FLAGS, id: { type: 'string' }, 'catch-up-ms': { type: 'string' } },
  });
  if (positionals.length > 0) throw new UsageError('chronacta', `unexpected argument "${positionals[0]}"`);
  const id = memberId(values.id);
  const catchUpMs = num('catch-up-ms', values['catch-up-ms']);
  if (catchUpMs !== undefined && (catchUpMs < 1 || catchUpMs > 3_600_000)) {
    throw new UsageError('chronacta', '--catch-up-ms takes 1 to 3600000');
  }
  const r = await withClient(values, (c) => c.promoteMember(id, catchUpMs !== undefined ? { catchUpMs } : {}));
  out({ promoted: id, ...r });
  return 0;
}

async function clusterTransfer(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: { ...CLIENT_FLAGS, to: { type: 'string' }, 'timeout-ms': { type: 'string' } },
  });
  if (positionals.length > 0) throw new UsageError('chronacta', `unexpected argument "${positionals[0]}"`);
  let to: number | undefined;
  if (values.to !== undefined) {
    to = num('to', values.to) as number;
    if (to < 1 || !Number.isSafeInteger(to)) throw new UsageError('chronacta', '--to takes a member id from 1');
  }
  const timeoutMs = num('timeout-ms', values['timeout-ms']);
  if (timeoutMs !== undefined && (timeoutMs < 1 || timeoutMs > 3_600_000)) {
    throw new UsageError('chronacta', '--timeout-ms takes 1 to 3600000');
  }
  const r = await withClient(values, (c) =>
    c.transferLeader({ ...(to !== undefined ? { to } : {}), ...(timeoutMs !== undefined ? { timeoutMs } : {}) }),
  );
  out({ transferred: true, ...r });
  return 0;
}
