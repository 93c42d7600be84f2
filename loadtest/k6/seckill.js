// @ts-check
/**
 * The "seckill" load scenario for k6: BUYERS buyers (more than the
 * stock) race for one SKU, each placing one order under its own
 * Idempotency-Key, spread over every base URL; teardown then reads the
 * service's own audit and turns every broken invariant into a custom metric
 * with a threshold, so a broken invariant makes k6 exit non-zero. Each buyer
 * has its own bearer token (HS256 from JWT_SECRET, the instances'
 * STOCK_JWT_SECRET); every GREEDY_EVERY-th order (10%) belongs to one of
 * GREEDY_BUYERS shared "greedy" buyers, and the SKU's per-buyer limit is
 * LIMIT, so limit_exceeded_by_server (buyers over the limit, from the audit)
 * must stay 0.
 *
 *   k6 run loadtest/k6/seckill.js                        # burst (default)
 *   SCENARIO=arrival k6 run loadtest/k6/seckill.js       # constant arrival rate
 *   docker compose --profile loadtest run --rm k6        # against the compose stack
 *
 * Environment (defaults in brackets):
 *   BASE_URL     [http://localhost:8080]  comma list of base URLs; buyers are spread over them
 *   SKU          [seckill-<run id>]       a fresh SKU per run unless given
 *   STOCK        [1000]   stock set through the admin API in setup
 *   BUYERS       [5000]   buyers, one order each
 *   QUANTITY     [1]      units per order
 *   VUS          [200]    concurrent VUs (burst; at most BUYERS) / pre-allocated VUs (arrival)
 *   MAX_VUS      [VUS]    arrival: most VUs k6 may start to keep the rate
 *   DURATION     [10s]    arrival: BUYERS arrive evenly over this time
 *   MAX_DURATION [5m]     burst: hard cap on the scenario
 *   RETRIES      [3]      retries of one order, same key, on 429 / 503 / no response
 *   READY_TIMEOUT[60]     seconds setup waits for every base URL's /readyz
 *   ADMIN_TOKEN  (required) bearer token of the admin API
 *   SCENARIO     [burst]  burst | arrival
 *   WINDOW       [0]      the SKU's payment window, seconds; > 0 runs the lifecycle: each
 *                winner's order is reserved, every third never pays, every tenth
 *                cancels, the rest confirm (some after their deadline)
 *   PAYMENT_TOKEN[ADMIN_TOKEN] bearer token of POST /v1/admin/orders/{id}/confirm
 *   SUMMARY      [loadtest/out/k6-summary.json]  JSON summary path (k6 does not create
 *                its folder: mkdir -p loadtest/out first); empty = none
 *
 * Why retries: a 429 (lock wait ran out) or a 503 is an answer of "not now",
 * and a real buyer tries again with the same key. The key makes that safe: a
 * retry of an order that was in fact committed comes back as a 200 replay and
 * deducts nothing. Without retries a busy server would leave stock unsold and
 * "sold == min(stock, demand)" could not be asserted. RETRIES=0 sends exactly
 * one POST per buyer.
 *
 * What teardown can prove: k6 gives teardown() no access to the VUs' counters,
 * so it checks what the audit alone proves (sold within stock, available ==
 * stock - sold, sold == ordered quantity, stocked == available + sold, every
 * order of this run has QUANTITY units, at most one order per buyer, and the
 * sale sold out when demand covered the stock). The created counter is
 * bounded by a threshold instead: no more 201s than sellable orders.
 */
import http from "k6/http";
import crypto from "k6/crypto";
import encoding from "k6/encoding";
import { check, fail, sleep } from "k6";
import exec from "k6/execution";
import { Counter, Gauge, Trend } from "k6/metrics";

// ---- configuration (init context: runs once per VU, so nothing random here) ----

/**
 * @param {string} name
 * @param {number} def
 * @param {number} min
 * @returns {number}
 */
function intEnv(name, def, min) {
  const raw = __ENV[name];
  if (raw === undefined || raw === "") return def;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min) {
    throw new Error(`${name}=${JSON.stringify(raw)}: want an integer >= ${min}`);
  }
  return n;
}

/**
 * @param {string} name
 * @param {string} def
 * @returns {string}
 */
function strEnv(name, def) {
  const raw = __ENV[name];
  return raw === undefined || raw === "" ? def : raw;
}

// The instances' STOCK_JWT_SECRET: each buyer gets its own HS256 token.
const JWT_SECRET = strEnv("JWT_SECRET", "");

/**
 * An HS256 bearer token for buyer sub, valid for an hour.
 * @param {string} sub
 * @returns {string}
 */
function buyerToken(sub) {
  const enc = (/** @type {object} */ o) => encoding.b64encode(JSON.stringify(o), "rawurl");
  const head = enc({ alg: "HS256", typ: "JWT" });
  const body = enc({ sub, exp: Math.floor(Date.now() / 1000) + 3600 });
  return `${head}.${body}.${crypto.hmac("sha256", JWT_SECRET, `${head}.${body}`, "base64rawurl")}`;
}

const BASE_URLS = strEnv("BASE_URL", "http://localhost:8080")
  .split(",")
  .map((s) => s.trim().replace(/\/+$/, ""))
  .filter((s) => s !== "");
if (BASE_URLS.length === 0) throw new Error("BASE_URL: no base URL given");

const KEY_CHARS = /^[A-Za-z0-9._:-]{1,64}$/;
const SKU_ENV = strEnv("SKU", "");
if (SKU_ENV !== "" && !KEY_CHARS.test(SKU_ENV)) {
  throw new Error(`SKU=${JSON.stringify(SKU_ENV)}: want 1-64 chars of [A-Za-z0-9._:-]`);
}
const STOCK = intEnv("STOCK", 1000, 0);
const BUYERS = intEnv("BUYERS", 5000, 1);
const QUANTITY = intEnv("QUANTITY", 1, 1);
const VUS = intEnv("VUS", 200, 1);
const MAX_VUS = intEnv("MAX_VUS", VUS, VUS);
const RETRIES = intEnv("RETRIES", 3, 0);
const READY_TIMEOUT = intEnv("READY_TIMEOUT", 60, 0);
const DURATION = strEnv("DURATION", "10s");
const MAX_DURATION = strEnv("MAX_DURATION", "5m");
const ADMIN_TOKEN = strEnv("ADMIN_TOKEN", "");
const SCENARIO = strEnv("SCENARIO", "burst");
const WINDOW = intEnv("WINDOW", 0, 0);
const PAYMENT_TOKEN = strEnv("PAYMENT_TOKEN", ADMIN_TOKEN);
const SUMMARY = __ENV.SUMMARY === undefined ? "loadtest/out/k6-summary.json" : __ENV.SUMMARY;

// Greedy buyers: every GREEDY_EVERY-th iteration (10% by default) orders as
// one of GREEDY_BUYERS shared identities, so each of them fires many
// concurrent orders with distinct keys; LIMIT is the SKU's per-buyer limit
// (0: none). Every other iteration is a buyer of its own, with one order.
const GREEDY_EVERY = intEnv("GREEDY_EVERY", 10, 0);
const GREEDY_BUYERS = intEnv("GREEDY_BUYERS", 5, 1);
const LIMIT = intEnv("LIMIT", QUANTITY, 0);
if (LIMIT > 0 && LIMIT < QUANTITY) throw new Error(`LIMIT=${LIMIT}: want 0 or at least QUANTITY=${QUANTITY}`);

/** @param {number} n the iteration: is it a greedy buyer's order? */
const isGreedy = (n) => GREEDY_EVERY > 0 && n % GREEDY_EVERY === 0;

/** Whole orders the stock can fill. */
const SELLABLE_ORDERS = Math.floor(STOCK / QUANTITY);
/** Orders that should succeed: every buyer within its allowance until the stock runs out. */
const EXPECTED_ORDERS = (() => {
  const greedyIters = GREEDY_EVERY > 0 ? Math.ceil(BUYERS / GREEDY_EVERY) : 0;
  let greedy = greedyIters;
  if (LIMIT > 0) {
    greedy = 0;
    for (let g = 0; g < GREEDY_BUYERS; g++) {
      const iters = Math.max(0, Math.ceil((greedyIters - g) / GREEDY_BUYERS));
      greedy += Math.min(iters, Math.floor(LIMIT / QUANTITY));
    }
  }
  return Math.min(SELLABLE_ORDERS, BUYERS - greedyIters + greedy);
})();
/** Units that must be sold by the end: min(stock, demand), in whole orders. */
const EXPECTED_SOLD = EXPECTED_ORDERS * QUANTITY;

// ---- metrics ----

const created = new Counter("created"); // 201
const replayed = new Counter("replayed"); // 200
const soldOut = new Counter("sold_out"); // 409 sold-out
const limitExceeded = new Counter("limit_exceeded"); // 409 limit-exceeded
const limitExceededByServer = new Counter("limit_exceeded_by_server"); // buyers over the limit, from the audit
const busy = new Counter("busy"); // 429
const errors = new Counter("errors"); // anything else, no response included
const orderDuration = new Trend("order_duration", true);
const confirmed = new Counter("confirmed"); // confirm answered 200
const cancelled = new Counter("cancelled"); // cancel answered 200
const lateConfirms = new Counter("late_confirms"); // confirm answered 409 order-expired
const transitionErrors = new Counter("transition_errors"); // a confirm or cancel answered anything else

const oversold = new Counter("oversold");
const soldMismatch = new Counter("sold_mismatch");
const invariantBroken = new Counter("invariant_broken");
const auditSold = new Gauge("audit_sold");
const auditAvailable = new Gauge("audit_available");

// ---- options ----

/** @type {Record<string, import("k6/options").Scenario>} */
const SCENARIOS = {
  burst: {
    executor: "shared-iterations",
    // k6 refuses to start a shared-iterations scenario with more VUs than
    // iterations, so a run with fewer buyers than VUS gets one VU per buyer.
    vus: Math.min(VUS, BUYERS),
    iterations: BUYERS,
    maxDuration: MAX_DURATION,
  },
  arrival: {
    // rate per timeUnit == BUYERS per DURATION: exactly BUYERS arrivals, evenly spaced.
    executor: "constant-arrival-rate",
    rate: BUYERS,
    timeUnit: DURATION,
    duration: DURATION,
    preAllocatedVUs: VUS,
    maxVUs: MAX_VUS,
  },
};
if (!(SCENARIO in SCENARIOS)) {
  throw new Error(`SCENARIO=${JSON.stringify(SCENARIO)}: want one of ${Object.keys(SCENARIOS).join(", ")}`);
}

/** @type {Record<string, string[]>} */
const thresholds = {
  oversold: ["count==0"],
  sold_mismatch: ["count==0"],
  invariant_broken: ["count==0"],
  // A 201 is a sold order: never more of them than the stock can fill.
  created: [`count<=${SELLABLE_ORDERS}`],
  // No buyer holds more than the per-buyer limit, says the audit.
  limit_exceeded_by_server: ["count==0"],
  transition_errors: ["count==0"],
};
if (SCENARIO === "arrival") {
  // An arrival the executor could not start is a buyer who never came: the
  // latency numbers would flatter the server and the sell-out check would lie.
  thresholds.dropped_iterations = ["count==0"];
}

/** @type {import("k6/options").Options} */
export const options = {
  scenarios: { [SCENARIO]: SCENARIOS[SCENARIO] },
  thresholds,
  summaryTrendStats: ["avg", "min", "med", "p(90)", "p(95)", "p(99)", "max"],
  setupTimeout: `${READY_TIMEOUT + 60}s`,
};

// 409 and 429 are answers the contract promises under a sell-out; they are not
// failed requests.
http.setResponseCallback(http.expectedStatuses(200, 201, 409, 429));

// ---- helpers ----

/**
 * @typedef {object} RunData
 * @property {string} runId
 * @property {string} sku
 * @property {number} sold0            sold before the run (a reused SKU keeps its old sales)
 * @property {number} orders0
 * @property {number} orderedQuantity0
 * @property {number} stocked0
 */

/**
 * @typedef {object} Audit
 * @property {string} sku
 * @property {number} available
 * @property {number} sold
 * @property {number} orders
 * @property {number} ordered_quantity
 * @property {number} stocked
 * @property {number} reserved
 * @property {number} confirmed_quantity
 * @property {number} return_mismatch
 * @property {boolean} consistent
 * @property {number} oversold
 * @property {number} buyers_over_limit buyers holding more than the per-buyer limit
 */

/** @returns {Record<string, string>} */
function adminHeaders() {
  return { Authorization: `Bearer ${ADMIN_TOKEN}`, "Content-Type": "application/json" };
}

/**
 * @param {import("k6/http").Response} res
 * @returns {any}
 */
function body(res) {
  try {
    return res.json();
  } catch (e) {
    return undefined;
  }
}

/**
 * @param {string} base
 * @param {string} sku
 * @returns {Audit}
 */
function readAudit(base, sku) {
  const res = http.get(`${base}/v1/admin/stock/${encodeURIComponent(sku)}/audit`, {
    headers: adminHeaders(),
    tags: { name: "GET /v1/admin/stock/{sku}/audit" },
  });
  const a = body(res);
  if (res.status !== 200 || a === undefined || a === null || typeof a.sold !== "number") {
    fail(`audit of ${sku} at ${base}: status ${res.status}, body ${String(res.body).slice(0, 200)}`);
  }
  return /** @type {Audit} */ (a);
}

/** @returns {string} 12 random base-36 chars */
function randomId() {
  let s = "";
  while (s.length < 12) s += Math.floor(Math.random() * 36).toString(36);
  return s;
}

/**
 * Seconds to wait before retrying an order, from Retry-After when it is given
 * in seconds, capped so a confused server cannot stall the run.
 * @param {import("k6/http").Response} res
 * @param {number} attempt
 * @returns {number}
 */
function backoff(res, attempt) {
  const ra = Number(res.headers["Retry-After"]);
  const base = Number.isFinite(ra) && ra >= 0 ? ra : 0.05 * 2 ** attempt;
  return Math.min(base, 5) * (0.5 + Math.random());
}

// ---- lifecycle ----

/** @returns {RunData} */
export function setup() {
  if (ADMIN_TOKEN === "") fail("ADMIN_TOKEN is required: setup sets the stock through the admin API");

  // Wait (bounded) until every instance is ready, so the burst does not hit a
  // half-started fleet.
  for (const base of BASE_URLS) {
    const deadline = Date.now() + READY_TIMEOUT * 1000;
    for (;;) {
      const res = http.get(`${base}/readyz`, { tags: { name: "GET /readyz" }, timeout: "5s" });
      if (res.status === 200) break;
      if (Date.now() >= deadline) fail(`${base}/readyz: status ${res.status} after ${READY_TIMEOUT}s`);
      sleep(1);
    }
  }

  const runId = randomId();
  const sku = SKU_ENV !== "" ? SKU_ENV : `seckill-${runId}`;
  const path = `/v1/admin/stock/${encodeURIComponent(sku)}`;

  const put = http.put(`${BASE_URLS[0]}${path}`, JSON.stringify({ available: STOCK, per_buyer_limit: LIMIT, payment_window_seconds: WINDOW }), {
    headers: adminHeaders(),
    tags: { name: "PUT /v1/admin/stock/{sku}" },
  });
  if (put.status !== 200) {
    fail(`PUT ${path}: status ${put.status}, want 200; body ${String(put.body).slice(0, 200)}`);
  }

  // Read the stock back through every instance: they must all see the same row.
  /** @type {{available: number, sold: number, version: number} | undefined} */
  let first;
  for (const base of BASE_URLS) {
    const res = http.get(`${base}/v1/stock/${encodeURIComponent(sku)}`, { tags: { name: "GET /v1/stock/{sku}" } });
    const s = body(res);
    if (res.status !== 200 || s === undefined || s === null) fail(`GET ${base}/v1/stock/${sku}: status ${res.status}`);
    if (s.available !== STOCK) fail(`GET ${base}/v1/stock/${sku}: available ${s.available}, want ${STOCK}`);
    if (first === undefined) first = s;
    else if (s.sold !== first.sold || s.version !== first.version) {
      fail(`GET ${base}/v1/stock/${sku}: sold/version ${s.sold}/${s.version}, ${BASE_URLS[0]} says ${first.sold}/${first.version}`);
    }
  }

  const a = readAudit(BASE_URLS[0], sku);
  if (!a.consistent) fail(`audit of ${sku} inconsistent before the run: ${JSON.stringify(a)}`);
  console.log(
    `seckill: scenario=${SCENARIO} sku=${sku} stock=${STOCK} buyers=${BUYERS} quantity=${QUANTITY} ` +
      `vus=${VUS} bases=${BASE_URLS.join(",")} expect sold=${EXPECTED_SOLD}`,
  );
  return {
    runId,
    sku,
    sold0: a.sold,
    orders0: a.orders,
    orderedQuantity0: a.ordered_quantity,
    stocked0: a.stocked,
  };
}

/**
 * One buyer: one order, one key, retried with that key while the answer is "not now".
 * @param {RunData} data
 */
export default function (data) {
  // Round-robin over the instances by buyer, so each gets an equal share.
  const base = BASE_URLS[exec.scenario.iterationInTest % BASE_URLS.length];
  // Unique across VUs (VU id) and iterations, and across runs (run id), so a
  // rerun against the same database never replays an old order.
  const key = `${data.runId}-${__VU}-${__ITER}`;
  const payload = JSON.stringify({ sku: data.sku, quantity: QUANTITY });
  // Each buyer is its own client address: the compose stack trusts its
  // private network as proxies (STOCK_TRUSTED_PROXIES), so the per-IP rate
  // limit sees this header's address, as it would see real buyers behind
  // the load balancer.
  const n = exec.scenario.iterationInTest;
  const clientIP = `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`;
  const params = {
    headers: {
      "Content-Type": "application/json",
      "Idempotency-Key": key,
      "X-Forwarded-For": clientIP,
      Authorization: `Bearer ${buyerToken(
        isGreedy(n) ? `${data.runId}-g${Math.floor(n / GREEDY_EVERY) % GREEDY_BUYERS}` : `${data.runId}-b${n}`,
      )}`,
    },
    tags: { name: "POST /v1/orders" },
  };

  for (let attempt = 0; ; attempt++) {
    const res = http.post(`${base}/v1/orders`, payload, params);
    orderDuration.add(res.timings.duration);
    switch (res.status) {
      case 201:
        created.add(1);
        check(res, {
          "201 is an order of this sku and quantity": (r) => {
            const o = body(r);
            return o !== undefined && o !== null && o.sku === data.sku && o.quantity === QUANTITY;
          },
        });
        if (WINDOW > 0) afterTheSale(base, n, body(res), params.headers.Authorization);
        return;
      case 200:
        replayed.add(1);
        return;
      case 409: {
        const p = body(res);
        const type = p && typeof p === "object" && "type" in p ? String(p.type) : "";
        if (type.endsWith("/limit-exceeded")) limitExceeded.add(1);
        else soldOut.add(1);
        return;
      }
      case 429:
        busy.add(1);
        break;
      default:
        errors.add(1, { status: String(res.status) });
        // Only "not now" answers are worth retrying; a 4xx will not change.
        if (res.status !== 0 && res.status !== 502 && res.status !== 503 && res.status !== 504) return;
    }
    if (attempt >= RETRIES) return;
    sleep(backoff(res, attempt));
  }
}

/**
 * A winner's fate under a payment window: every third never pays, every
 * tenth cancels within half the window, the rest confirm at a random moment
 * up to a quarter of the window past the deadline (409 order-expired then).
 * @param {string} base
 * @param {number} n the iteration
 * @param {any} order the 201's body
 * @param {string} buyerAuth the buyer's Authorization header
 */
function afterTheSale(base, n, order, buyerAuth) {
  if (!order || order.status !== "reserved" || n % 3 === 0) return;
  const cancel = n % 10 === 1;
  sleep(Math.random() * WINDOW * (cancel ? 0.5 : 1.25));
  const op = cancel ? "cancel" : "confirm";
  const path = cancel ? "/v1/orders/{id}/cancel" : "/v1/admin/orders/{id}/confirm";
  const res = http.post(base + path.replace("{id}", String(order.id)), null, {
    headers: { Authorization: cancel ? buyerAuth : `Bearer ${PAYMENT_TOKEN}` },
    tags: { name: `POST ${path}` },
  });
  const p = body(res);
  const type = p && typeof p === "object" && "type" in p ? String(p.type) : "";
  if (res.status === 200) (cancel ? cancelled : confirmed).add(1);
  else if (!cancel && res.status === 409 && type.endsWith("/order-expired")) lateConfirms.add(1);
  else transitionErrors.add(1, { op, status: String(res.status) });
}

/**
 * The audit once no order of the SKU is reserved (every reservation paid,
 * cancelled or swept), waiting at most the window and 30 s.
 * @param {string} sku
 * @returns {Audit}
 */
function settledAudit(sku) {
  let a = readAudit(BASE_URLS[0], sku);
  for (const end = Date.now() + (WINDOW + 30) * 1000; a.reserved > 0 && Date.now() < end; a = readAudit(BASE_URLS[0], sku)) {
    sleep(0.5);
  }
  return a;
}

/** @param {RunData} data */
export function teardown(data) {
  const a = WINDOW > 0 ? settledAudit(data.sku) : readAudit(BASE_URLS[0], data.sku);
  const sold = a.sold - data.sold0;
  const orders = a.orders - data.orders0;
  auditSold.add(a.sold);
  auditAvailable.add(a.available);

  // Each entry: [name, holds]. Every failing one is one invariant_broken.
  /** @type {Array<[string, boolean]>} */
  const invariants = [
    ["audit consistent", a.consistent === true],
    ["available >= 0", a.available >= 0],
    [`sold this run (${sold}) <= stock (${STOCK})`, sold <= STOCK],
    [`available (${a.available}) == stock - sold this run (${STOCK - sold})`, a.available === STOCK - sold],
    [`sold (${a.sold}) == confirmed quantity (${a.confirmed_quantity})`, a.sold === a.confirmed_quantity],
    [`stocked (${a.stocked}) == available + reserved + sold (${a.available + a.reserved + a.sold})`,
      a.stocked === a.available + a.reserved + a.sold],
    [`no reservation left (${a.reserved})`, a.reserved === 0],
    [`one return row per cancelled or expired order (${a.return_mismatch} mismatched)`, a.return_mismatch === 0],
    // One key per buyer, so more orders than buyers means a key sold twice.
    [`orders this run (${orders}) <= buyers (${BUYERS})`, orders <= BUYERS],
  ];
  if (WINDOW === 0) invariants.push([`orders this run (${orders}) * quantity == sold this run (${sold})`, orders * QUANTITY === sold]);
  let broken = 0;
  for (const [name, holds] of invariants) {
    check(holds, { [`invariant: ${name}`]: (h) => h });
    if (!holds) {
      broken++;
      console.error(`seckill: invariant broken: ${name}; audit ${JSON.stringify(a)}`);
    }
  }
  invariantBroken.add(broken);

  limitExceededByServer.add(a.buyers_over_limit);
  if (a.buyers_over_limit) console.error(`seckill: audit reports ${a.buyers_over_limit} buyers over the limit of ${LIMIT}`);

  oversold.add(a.oversold);
  if (a.oversold !== 0) console.error(`seckill: audit reports oversold=${a.oversold}`);

  // Demand (BUYERS * QUANTITY) covers the stock in the default scenario, so the
  // sale must sell out: exactly min(stock, demand) in whole orders, no less.
  // Under a payment window returned units may stay unsold: at most that.
  const mismatch = WINDOW > 0 ? sold > EXPECTED_SOLD : sold !== EXPECTED_SOLD;
  check(sold, { [`sold this run == ${EXPECTED_SOLD}`]: (s) => s === EXPECTED_SOLD });
  soldMismatch.add(mismatch ? 1 : 0);
  if (mismatch) console.error(`seckill: sold ${sold} this run, want ${EXPECTED_SOLD} (stock ${STOCK}, buyers ${BUYERS} x ${QUANTITY})`);

  console.log(`seckill: audit ${JSON.stringify(a)}; sold this run ${sold}, orders this run ${orders}`);
}

// ---- summary ----

/**
 * The parts of k6's end-of-test data this script reads.
 * @typedef {object} SummaryMetric
 * @property {string} type
 * @property {string} [contains]
 * @property {Record<string, number>} values
 * @property {Record<string, {ok: boolean}>} [thresholds]
 */

/**
 * @param {{metrics: Record<string, SummaryMetric>}} data
 * @returns {Record<string, string>}
 */
export function handleSummary(data) {
  /** @type {Record<string, string>} */
  const out = { stdout: textSummary(data) };
  if (SUMMARY !== "") out[SUMMARY] = JSON.stringify(data, null, 2);
  return out;
}

/**
 * A short text summary, written here rather than imported from the remote
 * jslib so the script runs offline and type-checks without it.
 * @param {{metrics: Record<string, SummaryMetric>}} data
 * @returns {string}
 */
function textSummary(data) {
  const m = data.metrics;
  /** @param {string} name @param {string} stat */
  const v = (name, stat) => (m[name] && m[name].values[stat] !== undefined ? m[name].values[stat] : 0);
  /** @param {number} x */
  const ms = (x) => `${x.toFixed(1)}ms`;
  const lines = [
    "",
    `seckill (${SCENARIO}): stock ${STOCK}, buyers ${BUYERS} x ${QUANTITY}, vus ${VUS}, ${BASE_URLS.length} base URL(s)`,
    `  created ${v("created", "count")}  replayed ${v("replayed", "count")}  sold_out ${v("sold_out", "count")}` +
      `  limit_exceeded ${v("limit_exceeded", "count")}  limit_exceeded_by_server ${v("limit_exceeded_by_server", "count")}` +
      `  busy ${v("busy", "count")}  errors ${v("errors", "count")}`,
    `  orders/s ${v("created", "rate").toFixed(1)}  requests/s ${v("http_reqs", "rate").toFixed(1)}`,
    `  order latency p50 ${ms(v("order_duration", "med"))}  p95 ${ms(v("order_duration", "p(95)"))}` +
      `  p99 ${ms(v("order_duration", "p(99)"))}  max ${ms(v("order_duration", "max"))}`,
    `  audit sold ${v("audit_sold", "value")}  available ${v("audit_available", "value")}` +
      `  oversold ${v("oversold", "count")}  sold_mismatch ${v("sold_mismatch", "count")}` +
      `  invariant_broken ${v("invariant_broken", "count")}`,
    "  thresholds:",
  ];
  let failed = 0;
  for (const name of Object.keys(m).sort()) {
    const th = m[name].thresholds;
    if (!th) continue;
    for (const expr of Object.keys(th)) {
      if (!th[expr].ok) failed++;
      lines.push(`    ${th[expr].ok ? "ok  " : "FAIL"} ${name}: ${expr}`);
    }
  }
  lines.push(failed === 0 ? "  result: PASS" : `  result: FAIL (${failed} threshold(s))`, "");
  return lines.join("\n");
}
