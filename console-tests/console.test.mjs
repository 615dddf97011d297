// The console as a person uses it: headless Chromium (Debian's, through playwright-core) against a real emulator
// started here. Signs in, watches an instance created through the API appear, adds a fault in the form and sees
// a call it fired on arrive in the live audit tail, sees the quota bar move, and keeps a screenshot of each view
// in target/console-screenshots/.

import { after, afterEach, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const target = process.env.CARGO_TARGET_DIR ?? path.join(root, "target");
const shots = path.join(target, "console-screenshots");
const USER = `console-user-${process.pid}-0123456789`;
const ADMIN = `console-admin-${process.pid}-0123456789`;

let emulator, url, work, browser, page;
const problems = [];

/// Start `fakecloud serve` on a free port with a throwaway database; resolves to its URL.
function startEmulator() {
  work = mkdtempSync(path.join(tmpdir(), "fakecloud-console-"));
  const bin = path.join(target, "debug", "fakecloud");
  emulator = spawn(
    bin,
    ["serve", "--listen", "127.0.0.1:0", "--db", path.join(work, "fc.db"), "--boot-delay", "0s", "--lb-provision-delay", "0s"],
    { env: { ...process.env, FAKECLOUD_USER_TOKEN: USER, FAKECLOUD_ADMIN_TOKEN: ADMIN, RUST_LOG: "warn" }, stdio: ["ignore", "ignore", "pipe"] },
  );
  return new Promise((resolve, reject) => {
    let log = "";
    emulator.stderr.on("data", (d) => {
      log += d;
      const m = log.match(/^fakecloud: serving ([^ ;\n]+)/m);
      if (m) resolve(m[1]);
    });
    emulator.on("exit", (code) => reject(new Error(`the emulator exited (${code}):\n${log}`)));
  });
}

/// A call to the emulator's API from the test, as a client of the cloud would make it.
async function api(method, p, body, tok = USER) {
  const resp = await fetch(url + p, {
    method,
    headers: { Authorization: `Bearer ${tok}`, ...(body ? { "Content-Type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: resp.status, body: await resp.json() };
}

/// Create a resource through the API, as a client would; its body.
async function create(p, body) {
  const { status, body: created } = await api("POST", p, body);
  assert.equal(status, 201, JSON.stringify(created));
  return created;
}

const shot = (name) => page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: true });

async function signIn(tok) {
  await page.goto(`${url}/console`);
  await page.fill("#token", tok);
  await page.click("#sign-in button[type=submit]");
}

before(async () => {
  mkdirSync(shots, { recursive: true });
  url = await startEmulator();
  browser = await chromium.launch({ executablePath: process.env.FAKECLOUD_CHROMIUM ?? "/usr/bin/chromium", args: ["--no-sandbox"] });
  page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  // Anything the page's policy refuses or a script throws fails the test it happens in (a refused call is
  // logged by the browser as "Failed to load resource": expected, and shown in the page).
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) problems.push(m.text());
  });
});

// No test ends with a script error, a refused policy, or an error left shown in the page.
afterEach(async () => {
  assert.deepEqual(problems.splice(0), []);
  assert.equal(await page.locator("#message").textContent(), "");
});

after(async () => {
  await browser?.close();
  emulator?.kill();
  if (work) rmSync(work, { recursive: true, force: true });
});

test("a wrong token is refused on the sign-in form", async () => {
  await signIn("not-a-token");
  await page.getByText("That is not a token of this emulator.").waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.length), 0);
});

test("an admin signs in and sees an instance created through the API appear", async () => {
  await signIn(ADMIN);
  await page.getByText("signed in as admin").waitFor();
  const inst = await create("/v1/instances", { name: "web-1", market: "spot", tags: { app: "web" } });
  await page.locator("#instances-table").getByText(inst.id).waitFor();
  const row = page.locator("#instances-table tr", { hasText: inst.id });
  await row.getByText("running").waitFor();
  // A spot instance can be reclaimed from the page: its notice then counts down.
  await row.getByRole("button", { name: "Reclaim" }).click();
  await row.getByText(/reclaimed in \d+s/).waitFor();
  await shot("instances");
});

test("load balancers and route tables are shown", async () => {
  const inst = await create("/v1/instances", { name: "web-2" });
  await create("/v1/load-balancers", { name: "web", listeners: [{ protocol: "TCP", port: 80, backend_port: 8080 }], backends: [inst.id] });
  await page.click("nav button[data-view=load-balancers]");
  await page.locator("#load-balancers-table").getByText("web").first().waitFor();
  // This emulator serves no data plane: its load balancers are records, and the page says so.
  await page.locator("#load-balancers-table").getByText("record only").first().waitFor();
  await shot("load-balancers");
  await page.click("nav button[data-view=route-tables]");
  await page.locator("#route-tables-table .bar").first().waitFor();
  await shot("route-tables");
});

test("a fault added in the form fires on a call that appears in the live audit tail", async () => {
  await page.click("nav button[data-view=faults]");
  // The API's own validation message is shown.
  await page.fill("#fault-form [name=status]", "200");
  await page.click("#fault-form button[type=submit]");
  await page.locator("#message").getByText("status").waitFor();
  const shown = await page.locator("#message").textContent();
  const direct = await api("POST", "/v1/faults", { action: { type: "error", status: 200, code: "X" } }, ADMIN);
  assert.ok(shown.includes(direct.body.error.message), `${shown} vs ${direct.body.error.message}`);

  await page.fill("#fault-form [name=id]", "region-down");
  await page.fill("#fault-form [name=operation]", "GetRegion");
  await page.fill("#fault-form [name=status]", "503");
  await page.fill("#fault-form [name=code]", "ServiceUnavailable");
  await page.click("#fault-form button[type=submit]");
  await page.locator("#faults-table").getByText("region-down").waitFor();
  assert.equal(await page.locator("#message").textContent(), "");

  await page.click("nav button[data-view=audit]");
  await page.getByText("live").waitFor();
  const faulted = await api("GET", "/v1/region");
  assert.equal(faulted.status, 503);
  const row = page.locator("#audit-table tr", { hasText: "region-down" });
  await row.getByText("GetRegion").waitFor();
  await row.getByText("503").waitFor();
  // The filters narrow the tail: by fault, then a status it does not have.
  await page.fill("#audit-filters [name=fault]", "*");
  assert.equal(await page.locator("#audit-table tbody tr").count(), 1);
  await page.fill("#audit-filters [name=status]", "2xx");
  await page.getByText("no calls yet").waitFor();
  await page.fill("#audit-filters [name=status]", "");
  await page.fill("#audit-filters [name=fault]", "");
  await shot("audit");

  await page.click("nav button[data-view=faults]");
  const rule = page.locator("#faults-table tr", { hasText: "region-down" });
  await rule.locator("td:nth-child(6)", { hasText: /^1$/ }).waitFor();
  await shot("faults");
  await rule.getByRole("button", { name: "Delete" }).click();
  await page.locator("#faults-table").getByText("none").waitFor();
});

test("an outage started in the form is shown with its time left, then stopped", async () => {
  await page.click("nav button[data-view=faults]");
  // Refused as the API refuses it, with its message.
  await page.selectOption("#outage-form [name=scope]", "zone");
  await page.click("#outage-form button[type=submit]");
  await page.locator("#message").getByText("zone").waitFor();
  await page.selectOption("#outage-form [name=scope]", "service");
  await page.selectOption("#outage-form [name=service]", "compute");
  await page.fill("#outage-form [name=duration_seconds]", "300");
  await page.click("#outage-form button[type=submit]");
  const row = page.locator("#outages-table tr", { hasText: "compute" });
  await row.getByText(/^\d+s$/).waitFor();
  assert.equal((await api("POST", "/v1/instances", { name: "down" })).status, 503);
  await row.getByRole("button", { name: "Stop" }).click();
  await page.locator("#outages-table").getByText("none").waitFor();
});

test("the quota bar follows usage and the limit set in the page", async () => {
  await page.click("nav button[data-view=quotas]");
  const row = page.locator("#quotas-table tr", { hasText: /^instances/ });
  await row.getByText("2 / 1000").waitFor();
  await create("/v1/instances", { name: "web-3" });
  await row.getByText("3 / 1000").waitFor();
  await row.locator("input[name=limit]").fill("4");
  await row.getByRole("button", { name: "Set" }).click();
  await row.getByText("3 / 4").waitFor();
  await shot("quotas");
});

test("a rate limit set in the form shows its buckets' tokens, and is deleted", async () => {
  // Room for this test's instances and the next ones' (the quota test left the limit at 4).
  assert.equal((await api("PUT", "/v1/quotas/instances", { limit: 20000 }, ADMIN)).status, 200);
  await page.click("nav button[data-view=faults]");
  await page.fill("#rate-limit-form [name=id]", "writes");
  await page.selectOption("#rate-limit-form [name=scope]", "operation");
  await page.click("#rate-limit-form button[type=submit]");
  // The API's message: scope operation needs the operation's name.
  await page.locator("#message").getByText("operation").waitFor();
  await page.selectOption("#rate-limit-form [name=scope]", "writes");
  await page.fill("#rate-limit-form [name=capacity]", "3");
  await page.fill("#rate-limit-form [name=refill_per_second]", "0.01");
  await page.click("#rate-limit-form button[type=submit]");
  const row = page.locator("#rate-limits-table tr", { hasText: "writes" });
  await row.locator("[data-bucket=all]").getByText("3 / 3").waitFor();
  await create("/v1/instances", { name: "bucket-1" });
  await create("/v1/instances", { name: "bucket-2" });
  await row.locator("[data-bucket=all]").getByText("1 / 3").waitFor();
  await shot("rate-limits");
  await row.getByRole("button", { name: "Delete" }).click();
  await page.locator("#rate-limits-table").getByText("none").waitFor();
});

test("a preset's button installs that cloud's throttling, another replaces it, and clear removes them", async () => {
  await page.click("nav button[data-view=faults]");
  await page.click("#rate-limit-presets button[data-preset=aws-ec2]");
  await page.locator("#rate-limits-table").getByText("aws-ec2-mutating").waitFor();
  // EC2's refusal is a 503 without Retry-After, as the preset says on the API.
  const ec2 = (await api("GET", "/v1/rate-limits", undefined, ADMIN)).body.items;
  assert.ok(ec2.some((r) => r.id === "aws-ec2-mutating" && r.limit.status === 503 && r.limit.retry_after === false));
  await page.click("#rate-limit-presets button[data-preset=gcp-compute]");
  await page.locator("#rate-limits-table").getByText("gcp-compute-").first().waitFor();
  await page.locator("#rate-limits-table").getByText("aws-ec2-").first().waitFor({ state: "detached" });
  // The installed one shows pressed (GET /v1/rate-limit-presets says which), the other not.
  await page.locator("#rate-limit-presets button[data-preset=gcp-compute][aria-pressed=true]").waitFor();
  assert.equal(await page.getAttribute("#rate-limit-presets button[data-preset=aws-ec2]", "aria-pressed"), "false");
  await shot("rate-limit-presets");
  await page.click("#rate-limit-presets button[data-preset='']");
  await page.locator("#rate-limits-table").getByText("none").waitFor();
  await page.locator("#rate-limit-presets button[data-preset=gcp-compute][aria-pressed=false]").waitFor();
});

test("a latency fault added in the form delays the calls it matches", async () => {
  await page.click("nav button[data-view=faults]");
  await page.selectOption("#fault-form [name=type]", "latency");
  // Only the chosen action's fields are shown.
  assert.equal(await page.locator("#fault-form [name=code]").isVisible(), false);
  await page.fill("#fault-form [name=id]", "slow-region");
  await page.fill("#fault-form [name=operation]", "GetRegion");
  await page.fill("#fault-form [name=ms]", "400");
  await page.click("#fault-form button[type=submit]");
  await page.locator("#faults-table tr", { hasText: "slow-region" }).getByText("latency 400ms").waitFor();
  const t0 = Date.now();
  assert.equal((await api("GET", "/v1/region")).status, 200);
  assert.ok(Date.now() - t0 >= 400, `the call took ${Date.now() - t0} ms`);
  await page.locator("#faults-table tr", { hasText: "slow-region" }).getByRole("button", { name: "Delete" }).click();
  await page.locator("#faults-table").getByText("none").waitFor();
  await page.selectOption("#fault-form [name=type]", "error");
});

test("a machine hung from the instances view is shown hung, then resumed", async () => {
  const inst = await create("/v1/instances", { name: "hang-1" });
  await page.click("nav button[data-view=instances]");
  const row = page.locator("#instances-table tr", { hasText: inst.id });
  await row.getByRole("button", { name: "Hang" }).click();
  await row.getByText("hung").waitFor();
  const hangs = await api("GET", "/v1/hangs", undefined, ADMIN);
  assert.deepEqual(hangs.body.items.map((h) => h.instance_id), [inst.id]);
  await row.getByRole("button", { name: "Resume" }).click();
  await row.getByRole("button", { name: "Hang" }).waitFor();
  assert.deepEqual((await api("GET", "/v1/hangs", undefined, ADMIN)).body.items, []);
});

test("a user token sees the cloud but not the admin views", async () => {
  await page.click("#sign-out");
  await signIn(USER);
  await page.getByText("signed in as user").waitFor();
  assert.equal(await page.locator("nav button[data-view=faults]").isVisible(), false);
  assert.equal(await page.locator("nav button[data-view=audit]").isVisible(), false);
  await page.click("nav button[data-view=quotas]");
  await page.locator("#quotas-table").getByText(/^\d+ \/ 20000$/).waitFor();
  assert.equal(await page.locator("#quotas-table button").count(), 0);
});

/// Run `f(i)` for i in 0..n, `inFlight` at a time.
async function pool(n, inFlight, f) {
  let next = 0;
  const worker = async () => {
    while (next < n) await f(next++);
  };
  await Promise.all(Array.from({ length: inFlight }, worker));
}

/// Add `n` audit entries straight to the emulator's SQLite file (WAL: beside the running server), as `n` reads
/// by the user would have left them — what 100,000 calls through the API would take minutes to write.
function seedAudit(n) {
  const sql = `WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ${n})
    INSERT INTO audit_log (time, request_id, role, operation, method, path, resource_id, status, error_code, latency_us)
    SELECT CAST(strftime('%s', 'now') AS INTEGER) * 1000, printf('seed%08d', i), 'user', 'GetRegion', 'GET', '/v1/region',
           NULL, 200, NULL, 90 FROM k`;
  const script = "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1], timeout=30)\nc.execute(sys.argv[2])\nc.commit()";
  const r = spawnSync("python3", ["-c", script, path.join(work, "fc.db"), sql], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
}

test("a big cloud stays usable: 10,000 instances paged, 100,000 audit entries with a bounded live tail", async () => {
  await pool(10000, 32, async (i) => {
    const { status } = await api("POST", "/v1/instances", { name: `big-${String(i).padStart(5, "0")}` });
    assert.equal(status, 201);
  });
  seedAudit(100000);
  const beyond = await api("GET", "/v1/audit?after=100000&limit=1", undefined, ADMIN);
  assert.equal(beyond.body.items.length, 1, "the audit log holds more than 100,000 entries");

  await page.click("#sign-out");
  await signIn(ADMIN);
  await page.getByText("signed in as admin").waitFor();
  // Paged: one page of 50 rows in the page, and the next page a click away.
  await page.locator("#instances-table tbody tr").nth(49).waitFor();
  assert.equal(await page.locator("#instances-table tbody tr").count(), 50);
  await page.locator("#instances-pager").getByRole("button", { name: "Next ›" }).click();
  await page.locator("#instances-pager").getByText("page 2").waitFor();
  await shot("instances-10k");

  // The tail starts from the latest entries, not the whole log, and a new call still shows up at once.
  await page.click("nav button[data-view=audit]");
  await page.getByText("live").waitFor();
  await create("/v1/instances", { name: "the-newest" });
  await page.locator("#audit-table tr", { hasText: "CreateInstance" }).first().waitFor();
  const rows = await page.locator("#audit-table tbody tr").count();
  assert.ok(rows <= 200, `${rows} rows shown`);
  await shot("audit-100k");
});
