// The status page in a real headless Chromium (Debian's /usr/bin/chromium), driven by
// playwright-core. Started by tests/e2e/status_page/mod.rs, which runs sluice and talks to
// this script over stdin/stdout, one word a line:
//   this script prints PAUSE_CLICKED, PAUSED_SHOWN, UNREACHABLE_SHOWN, CLICK_FAILURE_SHOWN,
//   RECOVERED and LINKS_SHOWN as it gets there; the test writes STOPPED once it has
//   stopped the sluice process, and STARTED once it has started it again.
// Environment: PLAYWRIGHT_CORE (the module's folder), CHROMIUM, URL, TOKEN, READ_TOKEN,
// CONNECTOR, TASKS, SHOTS (a folder for the screenshots).
'use strict';

const { chromium } = require(process.env.PLAYWRIGHT_CORE);
const readline = require('readline');
const assert = require('assert');

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const URL = env('URL');
const TOKEN = env('TOKEN');
const READ_TOKEN = env('READ_TOKEN');
const CONNECTOR = env('CONNECTOR');
const TASKS = Number(env('TASKS'));
const SHOTS = env('SHOTS');

const lines = readline.createInterface({ input: process.stdin });
const waiting = [];
lines.on('line', (line) => { const next = waiting.shift(); if (next) next(line.trim()); });
const nextLine = () => new Promise((resolve) => waiting.push(resolve));

function step(word) {
  process.stdout.write(word + '\n');
}

function log(text) {
  process.stderr.write(`browser: ${text}\n`);
}

async function login(page, token) {
  await page.waitForSelector('#login:not([hidden])', { timeout: 15000 });
  await page.fill('#token', token);
  await page.click('#login button[type=submit]');
}

const section = `section[data-connector="${CONNECTOR}"]`;

async function main() {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-dev-shm-usage'],
  });
  const requests = [];
  try {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    page.on('request', (r) => requests.push(r));
    const problems = [];
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    page.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()}`); });

    await page.goto(URL);
    // A wrong token is refused, and the page says so.
    await login(page, 'not-the-token');
    await page.waitForFunction(() => /refused/.test(document.getElementById('login-error').textContent), null, { timeout: 15000 });
    log(`wrong token: ${await page.textContent('#login-error')}`);
    assert.strictEqual(await page.evaluate(() => sessionStorage.length), 0, 'a refused token is not kept');

    // The right one: the connector and its running tasks.
    await login(page, TOKEN);
    await page.waitForSelector(section, { timeout: 15000 });
    await page.waitForFunction(([s, n]) => document.querySelectorAll(`${s} tr[data-state="RUNNING"]`).length === n,
      [section, TASKS], { timeout: 30000 });
    log(`${TASKS} tasks RUNNING`);
    assert.strictEqual(await page.evaluate(() => sessionStorage.getItem('sluice-admin-token')), TOKEN);
    assert.strictEqual(await page.evaluate(() => document.cookie), '', 'no cookie');
    // The plugin chain and the chart (two samples five seconds apart).
    await page.waitForFunction((s) => /parse/.test(document.querySelector(s).textContent), section, { timeout: 15000 });
    await page.waitForSelector(`${section} .chart svg polyline`, { timeout: 30000 });

    // At a phone's width nothing scrolls sideways.
    await page.setViewportSize({ width: 390, height: 844 });
    await page.waitForTimeout(500);
    const widths = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
    log(`at 390 px: scrollWidth ${widths[0]}, innerWidth ${widths[1]}`);
    assert.ok(widths[0] <= widths[1], `horizontal scroll at 390 px: ${widths}`);
    await page.screenshot({ path: `${SHOTS}/status-page-phone.png`, fullPage: true });
    await page.setViewportSize({ width: 1280, height: 900 });

    // The read token sees everything and has no buttons.
    const reader = await (await browser.newContext()).newPage();
    await reader.goto(URL);
    await login(reader, READ_TOKEN);
    await reader.waitForSelector(section, { timeout: 15000 });
    assert.strictEqual(await reader.locator('button[data-action]').count(), 0, 'buttons shown to the read token');
    assert.ok(await page.locator(`${section} button[data-action="pause"]`).count() === 1, 'no pause button for the token');
    await reader.close();

    // Pause: the test checks the API; the page shows it too.
    await page.click(`${section} button[data-action="pause"]`);
    step('PAUSE_CLICKED');
    await page.waitForFunction(([s, n]) => {
      const root = document.querySelector(s);
      return root && root.querySelector('h2 .state').textContent === 'PAUSED'
        && root.querySelectorAll('tr[data-state="PAUSED"]').length === n;
    }, [section, TASKS], { timeout: 30000 });
    await page.screenshot({ path: `${SHOTS}/status-page.png`, fullPage: true });
    step('PAUSED_SHOWN');

    // The process stops: the page says it is not answering.
    assert.strictEqual(await nextLine(), 'STOPPED');
    await page.waitForFunction(() => {
      const banner = document.getElementById('banner');
      return !banner.hidden && /not answering/.test(banner.textContent)
        && document.getElementById('connectors').classList.contains('stale');
    }, null, { timeout: 20000 });
    log(`banner: ${await page.textContent('#banner')}`);
    await page.screenshot({ path: `${SHOTS}/status-page-unreachable.png`, fullPage: true });
    step('UNREACHABLE_SHOWN');

    // A click while the process is down (restarting, say) says it was not answered.
    await page.click(`${section} button[data-action="resume"]`);
    await page.waitForFunction((s) => {
      const line = document.querySelector(`${s} [data-role="notice"]`);
      return line && line.classList.contains('error') && /did not answer/.test(line.textContent);
    }, section, { timeout: 15000 });
    log(`click while down: ${await page.textContent(`${section} [data-role="notice"]`)}`);
    step('CLICK_FAILURE_SHOWN');

    // Started again: the page recovers by itself, and the connector is still paused (the
    // click did nothing).
    assert.strictEqual(await nextLine(), 'STARTED');
    await page.waitForFunction((s) => {
      const root = document.querySelector(s);
      return document.getElementById('banner').hidden
        && !document.getElementById('connectors').classList.contains('stale')
        && root && root.querySelector('h2 .state').textContent === 'PAUSED';
    }, section, { timeout: 30000 });
    step('RECOVERED');

    // The connector's own link shows it alone; a name the process does not run says so,
    // and shows every connector rather than nothing.
    await page.click(`${section} h2 a.name`);
    await page.waitForFunction(() => /^#connector=/.test(location.hash)
      && document.querySelector('#connectors .nav a') !== null, null, { timeout: 15000 });
    assert.strictEqual(await page.evaluate(() => decodeURIComponent(location.hash.slice('#connector='.length))), CONNECTOR);
    assert.strictEqual(await page.locator('section[data-connector]').count(), 1);
    assert.strictEqual(await page.locator('[data-role="unknown-connector"]').count(), 0);
    await page.goto(`${URL}#connector=${encodeURIComponent('no-such-connector')}`);
    await page.waitForSelector('[data-role="unknown-connector"]', { timeout: 15000 });
    log(`unknown connector: ${await page.textContent('[data-role="unknown-connector"]')}`);
    await page.waitForSelector(section, { timeout: 15000 });
    await page.click('#connectors .nav a');
    await page.waitForFunction(() => document.querySelector('[data-role="unknown-connector"]') === null
      && document.querySelector('#connectors .nav') === null, null, { timeout: 15000 });
    assert.ok(await page.locator(section).count() === 1, 'the connector after "All connectors"');
    step('LINKS_SHOWN');

    // Nothing was fetched from anywhere but the process; the token never went in a URL.
    const origin = new globalThis.URL(URL).origin;
    for (const r of requests) {
      assert.strictEqual(new globalThis.URL(r.url()).origin, origin, `request elsewhere: ${r.url()}`);
      assert.ok(!r.url().includes(TOKEN), `token in a URL: ${r.url()}`);
    }
    // Failed fetches while the process is down are expected console errors; nothing else.
    const unexpected = problems.filter((p) => !/Failed to load resource|ERR_CONNECTION_REFUSED|Failed to fetch/.test(p) && !/401/.test(p));
    assert.deepStrictEqual(unexpected, []);
  } finally {
    await browser.close();
  }
}

main().then(() => process.exit(0), (error) => {
  process.stderr.write(`browser: FAILED: ${error && error.stack ? error.stack : error}\n`);
  process.exit(1);
});
