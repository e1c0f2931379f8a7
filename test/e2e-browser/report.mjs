// Opens an llmgate bench HTML report in Debian's chromium (playwright-core),
// checks that it rendered without a script or console error, and takes a
// screenshot of each of its parts: what the gateway adds, latency and
// throughput against load, the distributions, and the tables. Driven by
// report_test.go; docs/bench.md shows these screenshots.
//
// Env: REPORT (path of report.html), SCREENS_DIR, PREFIX (file name prefix,
// default "bench-"), CHROMIUM (default /usr/bin/chromium).
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import { join, resolve } from "node:path";

const report = process.env.REPORT;
const screens = process.env.SCREENS_DIR || ".ci/out/screens";
const prefix = process.env.PREFIX || "bench-";
if (!report) throw new Error("REPORT is required");
mkdirSync(screens, { recursive: true });
const step = (msg) => console.log(`[report] ${msg}`);
const fail = (msg) => { throw new Error(msg); };

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"],
});
const problems = [];
try {
  const page = await browser.newPage({ viewport: { width: 1500, height: 1000 }, deviceScaleFactor: 1 });
  page.on("console", (m) => { if (m.type() === "error" || m.type() === "warning") problems.push("console: " + m.text()); });
  page.on("pageerror", (e) => problems.push("page error: " + e.message));
  page.on("request", (r) => { if (!r.url().startsWith("file:")) problems.push("network request: " + r.url()); });
  await page.goto("file://" + resolve(report));
  await page.locator('#status[data-status="ok"]').waitFor({ state: "attached" });
  const errors = (await page.locator("#js-errors").textContent()).trim();
  if (errors) fail("script errors: " + errors);
  const charts = Number(await page.locator("body").getAttribute("data-charts-rendered"));
  step(`${charts} charts rendered`);
  if (!(charts >= 7)) fail("fewer than 7 charts");
  // Every table fits its section: nothing is cut at the page's edge.
  for (const id of ["cells", "cells-throughput", "added", "runs"]) {
    const t = page.locator("#" + id);
    if (!(await t.isVisible())) continue;
    const over = await t.evaluate((el) => el.scrollWidth - el.parentElement.clientWidth);
    if (over > 1) fail(`table #${id} is ${over} px wider than the page`);
  }
  let n = 0;
  const shot = async (selector, name) => {
    const el = page.locator(selector);
    if (!(await el.isVisible())) return;
    const file = join(screens, prefix + String(++n).padStart(2, "0") + "-" + name + ".png");
    await el.screenshot({ path: file });
    step("screenshot " + file);
  };
  await shot("#added-section", "gateway-adds");
  await shot("#latency", "latency");
  await shot("#throughput", "throughput");
  await shot("#dists", "distributions");
  await shot("section:has(#cells)", "latency-table");
  await shot("#runs-section", "runs");
  if (problems.length) fail(problems.join("\n"));
  step("PASS");
} finally {
  await browser.close();
}
