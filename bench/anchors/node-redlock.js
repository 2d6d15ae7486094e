// Anchor for dlock-bench: the same uncontended/contended lock+release loop
// through node-redlock (npm package "redlock", 5.0.0-beta.2) on ioredis.
//
//   NODE_PATH=DIR/node_modules node node-redlock.js -u URL[,URL...] --mode uncontended|contended
//       --workers N [--seconds S]
//
// Prints one JSON line in dlock-bench's shape with "lib":"node-redlock".
// Several comma-separated URLs make it a RedLock over those masters, a
// connection each (a lock is then held by a majority), as dlock-bench
// --redlock; the line then adds "kind":"redlock" and "masters".
// Workers are N concurrent async loops in one node process sharing ONE
// ioredis connection: node's own model (one thread, many requests in
// flight on one socket). Redlock is given that one client, so a lock is one
// EVALSHA to acquire and one to release (its acquire script: EXISTS, then
// SET PX; release: GET, DEL). Settings are the library's defaults (retry
// every 200 ms +- 100 ms jitter: it polls) except retryCount -1, wait
// forever, like dlock's DLOCK_WAIT_FOREVER. The lease is 10 s as in
// dlock-bench. Timing, warm-up (0.5 s), percentiles, waits, shares and the
// handoff are defined as in dlock-bench.c; holds of the one lock are ordered by the
// time their acquire returned (they cannot overlap), and an overlap is
// reported as broken mutual exclusion (exit 70).
"use strict";

const { default: Redlock } = require("redlock");
const Redis = require("ioredis");

const LEASE_MS = 10000;
const WARMUP_NS = 500000000n;

// Parse the same options as dlock-bench; exit 64 on a mistake.
function parseArgs(argv) {
  const o = { seconds: 5 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i], v = argv[i + 1];
    if (a === "-u" || a === "--url") { o.url = v; i++; }
    else if (a === "--mode") { o.mode = v; i++; }
    else if (a === "--workers") { o.workers = Number(v); i++; }
    else if (a === "--seconds") { o.seconds = Number(v); i++; }
    else usage(`unknown option: ${a}`);
  }
  if (!o.url) usage("-u URL is required");
  if (o.mode !== "uncontended" && o.mode !== "contended") usage("--mode must be uncontended or contended");
  if (!Number.isInteger(o.workers) || o.workers < 1 || o.workers > 1024) usage("--workers must be 1..1024");
  if (!(o.seconds > 0)) usage("--seconds must be above 0");
  return o;
}

function usage(msg) {
  process.stderr.write(`node-redlock anchor: ${msg}\n`);
  process.exit(64);
}

// ioredis options for redis://host:port[/db] or unix:///path.sock.
function redisOptions(url) {
  if (url.startsWith("unix://")) return { path: url.slice("unix://".length), lazyConnect: true };
  const u = new URL(url);
  return {
    host: u.hostname || "127.0.0.1",
    port: Number(u.port || 6379),
    db: Number((u.pathname || "/0").slice(1) || 0),
    username: u.username || undefined,
    password: u.password || undefined,
    lazyConnect: true,
  };
}

// Value at fraction q of sorted samples (nearest rank), in microseconds.
function pct(sorted, q) {
  if (sorted.length === 0) return 0;
  const rank = Math.max(1, Math.ceil(q * sorted.length));
  return Number(sorted[rank - 1]) / 1000;
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const urls = o.url.split(",");
  const clients = urls.map((u) => new Redis(redisOptions(u)));
  for (let i = 0; i < clients.length; i++) {
    try {
      await clients[i].connect();
    } catch (e) {
      process.stderr.write(`node-redlock anchor: cannot connect to ${urls[i]}: ${e.message}\n`);
      process.exit(69);
    }
  }
  const redlock = new Redlock(clients, { retryCount: -1 });
  // Redlock reports every failed attempt as an "error" event; an emitter
  // with no listener would throw. A busy lock is not an error here.
  redlock.on("error", () => {});

  const now = () => process.hrtime.bigint();
  const t0 = now();
  const measureFrom = t0 + WARMUP_NS;
  const measureTo = measureFrom + BigInt(Math.round(o.seconds * 1e9));
  const lat = [];
  const waits = [];
  const done = new Array(o.workers).fill(0);
  const holds = [];
  let stopped = false;

  async function worker(i) {
    const name = o.mode === "contended" ? `bench:nc:${process.pid}` : `bench:nu:${process.pid}:${i}`;
    while (!stopped) {
      const tStart = now();
      const lock = await redlock.acquire([name], LEASE_MS);
      const tAcq = now();
      const tRelCall = now();
      await lock.release();
      const tRel = now();
      const measured = tRel >= measureFrom && tRel <= measureTo;
      if (measured) {
        lat.push(tRel - tStart);
        waits.push(tAcq - tStart);
        done[i]++;
      }
      if (o.mode === "contended") holds.push({ i, tStart, tAcq, tRelCall, tRel, measured });
      if (tRel > measureTo) stopped = true;
    }
  }

  const workers = [];
  for (let i = 0; i < o.workers; i++) workers.push(worker(i));
  await Promise.all(workers);
  for (const c of clients) c.disconnect();

  const byValue = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
  lat.sort(byValue);
  waits.sort(byValue);
  const secs = o.seconds;
  const fairShare = lat.length / o.workers;
  const share = (n) => (fairShare > 0 ? n / fairShare : 0).toFixed(3);
  let line = `{"lib":"node-redlock","mode":"${o.mode}","workers":${o.workers},"ops":${lat.length},` +
    `"seconds":${secs.toFixed(3)},"ops_per_s":${(lat.length / secs).toFixed(1)},` +
    `"p50_us":${pct(lat, 0.5).toFixed(1)},"p99_us":${pct(lat, 0.99).toFixed(1)},` +
    `"p999_us":${pct(lat, 0.999).toFixed(1)},"wait_p99_us":${pct(waits, 0.99).toFixed(1)},` +
    `"wait_p999_us":${pct(waits, 0.999).toFixed(1)},"share_min":${share(Math.min(...done))},` +
    `"share_max":${share(Math.max(...done))}`;
  if (o.mode === "contended") {
    holds.sort((a, b) => (a.tAcq < b.tAcq ? -1 : a.tAcq > b.tAcq ? 1 : 0));
    const hand = [];
    for (let k = 1; k < holds.length; k++) {
      const a = holds[k - 1], b = holds[k];
      if (b.tAcq < a.tRelCall) {
        process.stderr.write("node-redlock anchor: mutual exclusion broken: two holders at once\n");
        process.exit(70);
      }
      if (!b.measured || a.i === b.i || b.tStart >= a.tAcq) continue;
      const d = b.tAcq - a.tRel;
      hand.push(d > 0n ? d : 0n);
    }
    hand.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    line += hand.length ? `,"handoff_p50_us":${(Number(hand[(hand.length - 1) >> 1]) / 1000).toFixed(1)}`
                        : `,"handoff_p50_us":null`;
  }
  if (clients.length > 1) line += `,"kind":"redlock","masters":${clients.length}`;
  process.stdout.write(line + "}\n");
}

main().catch((e) => {
  process.stderr.write(`node-redlock anchor: ${e && e.stack ? e.stack : e}\n`);
  process.exit(70);
});
