// End-to-end browser test of the llmgate console, driven by
// e2e_test.go: sign in, create a key, use it through the API, find the
// request on the usage and requests pages, stream in the playground
// against two demo models. Screenshots go to SCREENS_DIR.
//
// Env: BASE_URL (http://127.0.0.1:PORT), MASTER_KEY, SCREENS_DIR,
// CHROMIUM (default /usr/bin/chromium), MODELS (comma list, two or more).
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import { join } from "node:path";

const base = process.env.BASE_URL;
const master = process.env.MASTER_KEY;
const screens = process.env.SCREENS_DIR || ".ci/out/screens";
const models = (process.env.MODELS || "qwen2.5-7b-instruct,qwen3-32b").split(",");
if (!base || !master) throw new Error("BASE_URL and MASTER_KEY are required");
mkdirSync(screens, { recursive: true });

const step = (msg) => console.log(`[e2e] ${msg}`);
const fail = (msg) => { throw new Error(msg); };

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"],
});
const problems = [];
let n = 0;
try {
  const ctx = await browser.newContext({ viewport: { width: 1440, height: 900 }, deviceScaleFactor: 1 });
  const page = await ctx.newPage();
  page.setDefaultTimeout(15000);
  page.on("console", (m) => { if (m.type() === "error") problems.push("console: " + m.text()); });
  page.on("pageerror", (e) => problems.push("page error: " + e.message));
  const shot = async (name) => {
    n++;
    const file = join(screens, String(n).padStart(2, "0") + "-" + name + ".png");
    await page.screenshot({ path: file, fullPage: true });
    step("screenshot " + file);
  };

  // 1. Sign in.
  const resp = await page.goto(base + "/ui/");
  const csp = resp.headers()["content-security-policy"] || "";
  if (!csp.includes("script-src 'self'") || csp.includes("unsafe-inline")) fail("weak or missing CSP: " + csp);
  await page.getByTestId("login-key").waitFor();
  // The first visit is not an error: no red box before anything was typed.
  if (await page.getByTestId("login-error").isVisible()) fail("the first visit shows an error: " + (await page.getByTestId("login-error").textContent()));
  await shot("signin");
  await page.getByTestId("login-key").fill("sk-lg-not-a-real-key");
  await page.getByTestId("login-submit").click();
  await page.getByTestId("login-error").filter({ hasText: "not accepted" }).waitFor();
  await shot("signin-refused");
  problems.length = 0; // the 401 above is expected
  await page.getByTestId("login-key").fill(master);
  await page.getByTestId("login-submit").click();
  await page.getByTestId("kpi-requests").waitFor();
  const cookies = await ctx.cookies();
  const sess = cookies.find((c) => c.name.includes("llmgate_session"));
  if (!sess || !sess.httpOnly || sess.sameSite !== "Strict") fail("session cookie must be HttpOnly and SameSite=Strict: " + JSON.stringify(sess));
  step("signed in as admin");
  await shot("dashboard-empty");

  // 2. Create a key.
  await page.getByTestId("nav-keys").click();
  await page.getByTestId("key-name").fill("e2e-browser");
  await page.getByTestId("key-models").fill(models.join(", "));
  await page.getByTestId("create-key").click();
  const secret = (await page.getByTestId("new-secret").textContent()).trim();
  if (!secret.startsWith("sk-lg-")) fail("created key secret looks wrong: " + secret);
  step("created key " + secret.slice(0, 9) + "…");
  await shot("key-created");

  // 3. Use it through the API, as any client would.
  const r = await fetch(base + "/v1/chat/completions", {
    method: "POST",
    headers: { "Authorization": "Bearer " + secret, "Content-Type": "application/json", "X-Request-Id": "e2e-browser-1" },
    body: JSON.stringify({ model: models[0], messages: [{ role: "user", content: "Hello from the browser test" }], max_tokens: 24 }),
  });
  const body = await r.json();
  if (r.status !== 200 || !body.usage) fail("API call with the new key: " + r.status + " " + JSON.stringify(body));
  step(`API call with the new key: ${body.usage.prompt_tokens} prompt + ${body.usage.completion_tokens} completion tokens`);

  // The secret is never shown again.
  await page.reload();
  await page.getByTestId("key-row").first().waitFor();
  if ((await page.content()).includes(secret)) fail("the key secret is still on the page after a reload");
  // The keys page shows what the key spent (the demo's models have
  // prices; the ledger writes in batches: poll).
  let spent = "";
  for (let i = 0; i < 40; i++) {
    const row = page.getByTestId("key-row").filter({ hasText: "e2e-browser" });
    spent = (await row.getByTestId("key-spent").textContent()).trim();
    if (/^\$0\.0*[1-9]/.test(spent) || /^\$[1-9]/.test(spent)) break;
    await page.waitForTimeout(250);
    await page.reload();
    await page.getByTestId("key-row").first().waitFor();
  }
  if (!/^\$0\.0*[1-9]/.test(spent) && !/^\$[1-9]/.test(spent)) fail("the keys page shows no spend for the key that made a request: " + spent);
  step("keys page: e2e-browser spent " + spent);

  // 4. The request appears on the usage page (the ledger writes in batches: poll).
  await page.getByTestId("nav-usage").click();
  await page.getByTestId("usage-group").selectOption("key,model");
  let found = false;
  for (let i = 0; i < 40 && !found; i++) {
    await page.getByTestId("usage-apply").click();
    await page.waitForTimeout(250);
    found = (await page.getByTestId("usage-row").filter({ hasText: "e2e-browser" }).filter({ hasText: models[0] }).count()) > 0;
  }
  if (!found) fail("the key's request never appeared on the usage page");
  step("request visible on the usage page");
  const href = await page.getByTestId("usage-csv").getAttribute("href");
  const csv = await page.evaluate(async (u) => (await fetch(u, { credentials: "same-origin" })).text(), href);
  if (!csv.startsWith("day,key_id,key_name") || !csv.includes("e2e-browser")) fail("CSV export lacks the request: " + csv.slice(0, 200));
  await shot("usage");

  await page.getByTestId("nav-requests").click();
  await page.getByTestId("request-row").filter({ hasText: "e2e-browser-1" }).waitFor();
  await shot("requests");

  // 5. Playground: stream to two demo models side by side.
  await page.getByTestId("nav-playground").click();
  await page.getByTestId("pg-model-0").selectOption(models[0]);
  await page.getByTestId("pg-model-1").selectOption(models[1]);
  await page.getByTestId("pg-prompt").fill("In two sentences, why does continuous batching raise GPU throughput?");
  await page.getByTestId("pg-run").click();
  for (const i of [0, 1]) {
    await page.getByTestId("pg-state-" + i).filter({ hasText: /^(done|error)/ }).waitFor({ timeout: 60000 });
    const st = await page.getByTestId("pg-state-" + i).textContent();
    const out = await page.getByTestId("pg-output-" + i).textContent();
    const ttft = await page.getByTestId("pg-ttft-" + i).textContent();
    const tps = await page.getByTestId("pg-tps-" + i).textContent();
    const toks = await page.getByTestId("pg-tokens-" + i).textContent();
    step(`playground ${models[i]}: ${st}, TTFT ${ttft}, ${tps} tokens/s, ${toks} tokens, ${out.length} chars`);
    if (!st.startsWith("done")) fail(`playground ${models[i]} failed: ${out}`);
    if (!out.trim() || !/\d/.test(ttft) || !(parseInt(toks.replace(/\D/g, ""), 10) > 0)) fail(`playground ${models[i]} has no output or figures`);
  }
  await shot("playground");

  // 6. Dashboard and models after traffic.
  await page.getByTestId("nav-dashboard").click();
  await page.getByTestId("kpi-requests").filter({ hasText: /[1-9]/ }).waitFor();
  await shot("dashboard");
  await page.getByTestId("nav-models").click();
  await page.getByTestId("model-card").first().waitFor();
  await shot("models");

  // 7. A user key sees only its own usage and cannot manage keys.
  const user = await browser.newContext({ viewport: { width: 1440, height: 900 } });
  const up = await user.newPage();
  await up.goto(base + "/ui/");
  await up.getByTestId("login-key").fill(secret);
  await up.getByTestId("login-submit").click();
  await up.getByTestId("kpi-requests").waitFor();
  await up.getByTestId("nav-keys").click();
  await up.getByTestId("key-row").first().waitFor();
  if (await up.getByTestId("create-key-form").count()) fail("a user key sees the create-key form");
  const rows = await up.getByTestId("key-row").count();
  if (rows !== 1) fail(`a user key sees ${rows} keys, want its own only`);
  const status = await up.evaluate(async () => (await fetch("/ui/api/keys", { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" })).status);
  if (status !== 403) fail("POST /ui/api/keys without CSRF token from a user session: " + status + ", want 403");
  await up.screenshot({ path: join(screens, String(++n).padStart(2, "0") + "-user-keys.png"), fullPage: true });
  await user.close();

  await page.getByTestId("signout").click();
  await page.getByTestId("login-key").waitFor();
  const real = problems.filter((p) => !p.includes("401") && !p.includes("403"));
  if (real.length) fail("browser errors (CSP violations or script errors):\n" + real.join("\n"));
  step("PASS");
} finally {
  await browser.close();
}
