'use strict';
// node-redlock 4.2 (redlock@4.2.0 with ioredis, bench/node/package-lock.json)
// over the Redis nodes bench/targets.sh started, as redlock's comparison:
//
//   node bench/node/bench.js single NODES PREFIX CYCLES WARM
//       one client: CYCLES timed lock(r, 30000) + unlock() cycles on one
//       resource, after WARM untimed ones; prints "key=value" lines: the
//       p50/p90/p99 of the cycle, of lock() and of unlock() in microseconds
//   node bench/node/bench.js workers NODES PREFIX WORKERS SECONDS
//       WORKERS async workers sharing one Redlock (one ioredis connection
//       per node), each locking and unlocking its own resource in a loop
//       for SECONDS; prints cycles, cycles_per_s, errors
//
// NODES is "host:port,host:port,..."; PREFIX makes the resource names of
// this run unique.  retryCount 0: a lock that is refused is an error,
// counted (and, in single, fatal: nobody else uses these resources).
// Every run also prints cpu_us: this process's CPU time (user + system).
// With NODE_SAMPLES=FILE in the environment, single also writes every timed
// cycle's time (us) to FILE, one a line.

const Redis = require('ioredis');
const Redlock = require('redlock');

const TTL = 30000;	// as redlock_try_lock(r, 30000) in bench/targets.sh

function usage() {
	process.stderr.write('usage: node bench.js single NODES PREFIX CYCLES WARM | workers NODES PREFIX WORKERS SECONDS\n');
	process.exit(2);
}

function pct(sorted, p) {
	if (sorted.length === 0) return NaN;
	let i = Math.ceil(sorted.length * p) - 1;
	if (i < 0) i = 0;
	return sorted[i];
}

function us(t0, t1) { return Number(t1 - t0) / 1000; }

async function main() {
	const [mode, nodes, prefix, a, b] = process.argv.slice(2);
	if (!mode || !nodes || !prefix || a === undefined || b === undefined) usage();
	const clients = nodes.split(',').map((hp) => {
		const [host, port] = hp.split(':');
		return new Redis({ host, port: Number(port), enableOfflineQueue: true, lazyConnect: false,
			maxRetriesPerRequest: 1 });
	});
	await Promise.all(clients.map((c) => c.ping()));
	const redlock = new Redlock(clients, { driftFactor: 0.01, retryCount: 0, retryDelay: 200, retryJitter: 100 });
	redlock.on('clientError', (err) => process.stderr.write(`node-redlock: client error: ${err.message}\n`));
	const cpu0 = process.cpuUsage();
	const out = [];

	if (mode === 'single') {
		const cycles = Number(a), warm = Number(b);
		const res = `${prefix}:single`;
		const cyc = [], lk = [], ul = [];
		for (let i = -warm; i < cycles; i++) {
			const t0 = process.hrtime.bigint();
			const lock = await redlock.lock(res, TTL);
			const t1 = process.hrtime.bigint();
			await lock.unlock();
			const t2 = process.hrtime.bigint();
			if (i >= 0) {
				cyc.push(us(t0, t2));
				lk.push(us(t0, t1));
				ul.push(us(t1, t2));
			}
		}
		if (process.env.NODE_SAMPLES) {
			require('fs').writeFileSync(process.env.NODE_SAMPLES, cyc.map((x) => x.toFixed(1)).join('\n') + '\n');
		}
		for (const [name, v] of [['cycle', cyc], ['lock', lk], ['unlock', ul]]) {
			v.sort((x, y) => x - y);
			out.push(`${name}_p50=${pct(v, 0.5).toFixed(1)}`, `${name}_p90=${pct(v, 0.9).toFixed(1)}`,
				`${name}_p99=${pct(v, 0.99).toFixed(1)}`);
		}
		out.push(`cycles=${cyc.length}`);
	} else if (mode === 'workers') {
		const nworkers = Number(a), secs = Number(b);
		let cycles = 0, errors = 0, stop = false;
		const worker = async (w) => {
			const res = `${prefix}:w${w}`;
			while (!stop) {
				try {
					const lock = await redlock.lock(res, TTL);
					await lock.unlock();
					if (!stop) cycles++;
				} catch (e) {
					errors++;
				}
			}
		};
		// one untimed cycle per worker, so that every script is loaded
		await Promise.all([...Array(nworkers).keys()].map(async (w) => {
			const lock = await redlock.lock(`${prefix}:w${w}`, TTL);
			await lock.unlock();
		}));
		const t0 = process.hrtime.bigint();
		const timer = new Promise((resolve) => setTimeout(() => { stop = true; resolve(); }, secs * 1000));
		const running = [...Array(nworkers).keys()].map(worker);
		await timer;
		const t1 = process.hrtime.bigint();
		await Promise.all(running);
		const elapsed = Number(t1 - t0) / 1e9;
		out.push(`cycles=${cycles}`, `errors=${errors}`, `seconds=${elapsed.toFixed(3)}`,
			`cycles_per_s=${(cycles / elapsed).toFixed(1)}`);
	} else {
		usage();
	}
	const cpu = process.cpuUsage(cpu0);
	out.push(`cpu_us=${cpu.user + cpu.system}`);
	process.stdout.write(out.join('\n') + '\n');
	await Promise.all(clients.map((c) => c.quit()));
}

main().catch((e) => {
	process.stderr.write(`node-redlock bench: ${e.stack || e}\n`);
	process.exit(1);
});
