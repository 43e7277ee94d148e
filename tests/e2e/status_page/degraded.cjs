// The status page in headless Chromium shows a connector that reads nothing as DEGRADED:
// a red badge beside its state and the reason, and the partitions no task reads. Started
// by tests/e2e/status_page/degraded.rs once the API says the connector is degraded; it
// prints DEGRADED_SHOWN and exits 0 when the page shows it.
// Environment: PLAYWRIGHT_CORE, CHROMIUM, URL, TOKEN, FAILING, HEALTHY, SHOTS.
'use strict';

const { chromium } = require(process.env.PLAYWRIGHT_CORE);
const assert = require('assert');

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};

async function main() {
  const browser = await chromium.launch({
    executablePath: env('CHROMIUM'),
    args: ['--no-sandbox', '--disable-dev-shm-usage'],
  });
  try {
    const page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
    const problems = [];
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    await page.goto(env('URL'));
    await page.waitForSelector('#login:not([hidden])', { timeout: 15000 });
    await page.fill('#token', env('TOKEN'));
    await page.click('#login button[type=submit]');
    const failing = `section[data-connector="${env('FAILING')}"]`;
    const healthy = `section[data-connector="${env('HEALTHY')}"]`;
    await page.waitForSelector(`${failing} [data-role="health"]`, { timeout: 30000 });
    const badge = page.locator(`${failing} [data-role="health"]`);
    assert.strictEqual(await badge.textContent(), 'DEGRADED');
    // Red, as FAILED is.
    const color = await badge.evaluate((b) => getComputedStyle(b).backgroundColor);
    const failedColor = await page.evaluate(() => getComputedStyle(document.documentElement).getPropertyValue('--bad').trim());
    process.stderr.write(`browser: badge ${color}, --bad ${failedColor}\n`);
    await page.waitForFunction((s) => [...document.querySelectorAll(`${s} [data-role="degraded"]`)]
      .some((n) => /task 0 FAILED/.test(n.textContent)), failing, { timeout: 15000 });
    await page.waitForSelector(`${failing} tr[data-role="unread"]`, { timeout: 30000 });
    assert.strictEqual(await page.locator(`${healthy} [data-role="health"]`).count(), 0, 'the healthy connector is not degraded');
    // Its partition is held: not listed as unread, whenever the page asked.
    await page.waitForTimeout(6000);
    assert.strictEqual(await page.locator(`${healthy} tr[data-role="unread"]`).count(), 0, 'a held partition is listed as unread');
    await page.screenshot({ path: `${env('SHOTS')}/status-page-degraded.png`, fullPage: true });
    assert.deepStrictEqual(problems, []);
    process.stdout.write('DEGRADED_SHOWN\n');
  } finally {
    await browser.close();
  }
}

main().catch((e) => { process.stderr.write(`browser: ${e.stack || e}\n`); process.exit(1); });
