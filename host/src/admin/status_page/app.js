// The status page's script: reads the admin API every few seconds with the token kept in
// this tab's sessionStorage (sent as Authorization, never in a URL or a cookie) and draws
// every connector, or the one the URL names (#connector=NAME). No framework, no build
// step; data only ever goes in as text.
'use strict';

const REFRESH_MS = 3000;
const TIMEOUT_MS = 4000;
const TOKEN_KEY = 'sluice-admin-token';
const SVG_NS = 'http://www.w3.org/2000/svg';

const page = {
  token: sessionStorage.getItem(TOKEN_KEY),
  access: null, // 'all' | 'read' | 'open', from the X-Sluice-Access answer header
  lastAnswer: null, // Date of the last answer
  failingSince: null, // Date the process stopped answering
  notices: new Map(), // connector name -> {text, error}
  timer: null,
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function clock(date) {
  return date.toLocaleTimeString([], { hour12: false });
}

function number(value) {
  if (value === null || value === undefined) return '–';
  if (typeof value !== 'number') return String(value);
  return value.toLocaleString(undefined, { maximumFractionDigits: 1 });
}

// One call of the API: {status, body, access}, or throws when the process does not answer.
async function api(method, path) {
  const headers = { 'X-Sluice-Request': '1', Accept: 'application/json' };
  if (page.token) headers.Authorization = 'Bearer ' + page.token;
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), TIMEOUT_MS);
  try {
    const response = await fetch(path, {
      method, headers, cache: 'no-store', credentials: 'omit', signal: abort.signal,
    });
    const text = await response.text();
    let body = null;
    try { body = text ? JSON.parse(text) : null; } catch (_) { body = { message: text }; }
    return { status: response.status, body, access: response.headers.get('X-Sluice-Access') };
  } finally {
    clearTimeout(timer);
  }
}

function message(answer) {
  const text = answer.body && answer.body.message ? answer.body.message : '';
  return `${answer.status}${text ? ': ' + text : ''}`;
}

function showBanner(text, kind) {
  const banner = $('banner');
  banner.textContent = text;
  banner.className = kind || '';
  banner.hidden = !text;
}

// The connector the URL names (`#connector=NAME`, as each connector's heading links), or
// null for all of them.
function wanted() {
  const match = /^#connector=(.+)$/.exec(location.hash);
  if (!match) return null;
  try { return decodeURIComponent(match[1]); } catch (_) { return match[1]; }
}

function showLogin(error) {
  $('login').hidden = false;
  $('login-error').textContent = error || '';
  $('forget').hidden = true;
  $('connectors').replaceChildren();
  $('token').focus();
}

async function refresh() {
  clearTimeout(page.timer);
  let answer;
  try {
    answer = await api('GET', '/connectors?expand=status');
  } catch (error) {
    unreachable(error);
    schedule();
    return;
  }
  page.failingSince = null;
  page.lastAnswer = new Date();
  $('updated').textContent = 'updated ' + clock(page.lastAnswer);
  if (answer.status === 401) {
    const refused = page.token !== null;
    sessionStorage.removeItem(TOKEN_KEY);
    page.token = null;
    // Asked once; a refused token says so and is asked again. No refresh until then.
    showBanner('');
    showLogin(refused ? `The token was refused (${message(answer)}).` : '');
    return;
  }
  $('login').hidden = true;
  $('forget').hidden = page.token === null;
  $('connectors').classList.remove('stale');
  if (answer.status !== 200 || !answer.body || typeof answer.body !== 'object') {
    showBanner(`The process answered ${message(answer)}`, 'info');
    schedule();
    return;
  }
  showBanner('');
  page.access = answer.access;
  const all = Object.keys(answer.body).sort();
  const named = wanted();
  const names = named !== null && all.includes(named) ? [named] : all;
  const histories = await Promise.all(names.map((name) =>
    api('GET', `/connectors/${encodeURIComponent(name)}/history`)
      .then((h) => (h.status === 200 ? h.body : null))
      .catch(() => null)));
  try {
    render(names.map((name, i) => ({ name, status: answer.body[name].status, history: histories[i] })),
      named, all.length);
  } catch (error) {
    // A figure the page cannot draw must not stop it from updating.
    showBanner(`Could not draw the answer: ${error.message}`, 'info');
  } finally {
    schedule();
  }
}

function schedule() {
  clearTimeout(page.timer);
  page.timer = setTimeout(refresh, REFRESH_MS);
}

function unreachable(error) {
  if (!page.failingSince) page.failingSince = new Date();
  const since = clock(page.failingSince);
  const last = page.lastAnswer ? `; the figures below are from ${clock(page.lastAnswer)}` : '';
  const why = error && error.name === 'AbortError' ? 'no answer within 4 s' : 'connection failed';
  showBanner(`The sluice process is not answering (since ${since}, ${why})${last}. Retrying every ${REFRESH_MS / 1000} s.`);
  $('connectors').classList.add('stale');
  $('updated').textContent = 'not answering';
}

// Draws `connectors`; `named` is the connector the URL names (null: all), `total` how many
// the process runs. A name it does not run is said so above all of them, never a blank page.
function render(connectors, named, total) {
  const worker = connectors.map((c) => c.status && c.status.connector && c.status.connector.worker_id).find(Boolean);
  $('worker').textContent = worker ? `process ${worker}` : '';
  const main = $('connectors');
  const top = [];
  if (named !== null) {
    const found = connectors.length === 1 && connectors[0].name === named;
    if (!found) {
      top.push(el('p', { class: 'notice error', 'data-role': 'unknown-connector',
        text: `This process runs no connector named “${named}”; showing all ${total}.` }));
    }
    top.push(el('p', { class: 'nav' }, el('a', { href: '#', text: `All connectors (${total})` })));
  }
  if (connectors.length === 0) {
    main.replaceChildren(...top, el('p', { class: 'empty', text: 'This process runs no connector.' }));
    return;
  }
  main.replaceChildren(...top, ...connectors.map(renderConnector));
}

function figure(label, value, alarm) {
  return el('div', { class: 'figure' + (alarm ? ' alarm' : '') },
    el('span', { class: 'label', text: label }),
    el('span', { class: 'value', text: number(value) }));
}

function renderConnector({ name, status, history }) {
  const s = status || {};
  const state = (s.connector && s.connector.state) || 'UNKNOWN';
  const section = el('section', { class: 'connector', 'data-connector': name });
  section.append(el('h2', {},
    el('a', { class: 'name', href: '#connector=' + encodeURIComponent(name), text: name }),
    el('span', { class: 'state', 'data-state': state, text: state }),
    s.health === 'DEGRADED'
      ? el('span', { class: 'state', 'data-state': 'DEGRADED', 'data-role': 'health', text: 'DEGRADED' })
      : null));
  if (s.connector && s.connector.trace) {
    section.append(el('p', { class: 'notice error', text: s.connector.trace }));
  }
  for (const reason of s.health_reasons || []) {
    section.append(el('p', { class: 'notice error', 'data-role': 'degraded', text: `Degraded: ${reason}` }));
  }
  if (page.access !== 'read') section.append(actions(name));
  section.append(noticeLine(name));
  section.append(el('div', { class: 'grid' },
    figure('rows/s (30 s)', s.rows_per_second),
    figure('lag', s.lag, (s.unread_partitions || []).length > 0),
    figure('rows written', s.rows_written),
    figure('records committed', s.records_committed),
    figure('dead letters', s.dead_letters, s.dead_letters > 0),
    figure('skipped', s.records_skipped, s.records_skipped > 0),
    figure('duplicates', s.duplicates_skipped),
    figure('offset gaps', s.offset_gaps, s.offset_gaps > 0),
    figure('offset resets', s.offset_resets, s.offset_resets > 0),
    figure('offsets skipped', s.offsets_skipped, s.offsets_skipped > 0)));
  section.append(el('p', { class: 'hint', text: 'rows/s and lag: every process of the connector (from their heartbeats); the counts: this process, since it started.' }));
  section.append(chart(history));
  section.append(el('h3', { text: 'Tasks' }), tasksTable(s.tasks || []));
  section.append(el('h3', { text: 'Processes' }), processesTable(s.processes || []));
  section.append(el('h3', { text: 'Lag by partition' }), partitionsTable(s.partitions || []));
  if ((s.unread_partitions || []).length > 0) {
    section.append(el('h3', { text: 'Partitions no task reads' }), unreadTable(s.unread_partitions));
  }
  section.append(el('h3', { text: 'Transforms' }), pluginsTable(s.plugins || []));
  section.append(el('h3', { text: 'Last error (this process)' }), lastError(s.last_error));
  return section;
}

const ACTIONS = [
  ['Pause', 'PUT', 'pause'],
  ['Resume', 'PUT', 'resume'],
  ['Restart', 'POST', 'restart?includeTasks=true'],
  ['Stop', 'PUT', 'stop'],
];

function actions(name) {
  return el('div', { class: 'actions' }, ACTIONS.map(([label, method, path]) =>
    el('button', {
      type: 'button',
      'data-action': label.toLowerCase(),
      text: label,
      onclick: (event) => act(event.currentTarget, name, label, method, path),
    })));
}

// The line under a connector's buttons: what became of the last click.
function noticeLine(name) {
  const notice = page.notices.get(name);
  return el('p', { class: 'notice' + (notice && notice.error ? ' error' : ''), 'data-role': 'notice', text: notice ? notice.text : '' });
}

// Shows a connector's notice now, in the section already drawn: the refresh after a click
// draws nothing while the process does not answer.
function showNotice(name) {
  for (const section of document.querySelectorAll('section[data-connector]')) {
    if (section.dataset.connector !== name) continue;
    const line = section.querySelector('[data-role="notice"]');
    if (line) line.replaceWith(noticeLine(name));
  }
}

async function act(button, name, label, method, path) {
  button.disabled = true;
  page.notices.set(name, { text: `${label}: sent…` });
  showNotice(name);
  let notice;
  try {
    const answer = await api(method, `/connectors/${encodeURIComponent(name)}/${path}`);
    if (answer.status >= 200 && answer.status < 300) {
      notice = { text: `${label}: accepted at ${clock(new Date())}; every process applies it within seconds.` };
    } else {
      notice = { text: `${label} refused: ${message(answer)}`, error: true };
    }
  } catch (error) {
    notice = { text: `${label}: the process did not answer (${error && error.name === 'AbortError' ? 'timeout' : 'connection failed'}); it may be restarting. Try again.`, error: true };
  }
  page.notices.set(name, notice);
  showNotice(name);
  button.disabled = false;
  refresh();
}

function chart(history) {
  const box = el('div', { class: 'chart' });
  const points = (history && history.samples ? history.samples : []).filter((p) => p.rows_per_second !== null);
  const minutes = history ? Math.round(history.window_seconds / 60) : 15;
  if (points.length < 2) {
    box.append(el('p', { class: 'empty', text: `rows/s of this process over the last ${minutes} minutes: collecting (a sample every ${history ? history.interval_seconds : 5} s).` }));
    return box;
  }
  const width = 300;
  const height = 60;
  const start = points[0].at;
  const span = Math.max(points[points.length - 1].at - start, 1);
  const max = Math.max(...points.map((p) => p.rows_per_second), 1);
  const svg = document.createElementNS(SVG_NS, 'svg');
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('preserveAspectRatio', 'none');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', `rows per second over the last ${minutes} minutes, at most ${number(max)}`);
  const line = document.createElementNS(SVG_NS, 'polyline');
  line.setAttribute('points', points.map((p) => {
    const x = ((p.at - start) / span) * width;
    const y = height - (p.rows_per_second / max) * (height - 4) - 2;
    return `${x.toFixed(1)},${y.toFixed(1)}`;
  }).join(' '));
  svg.append(line);
  const now = points[points.length - 1].rows_per_second;
  box.append(svg, el('div', { class: 'caption' },
    el('span', { text: `rows/s of this process, last ${minutes} min (from ${clock(new Date(start))})` }),
    el('span', { text: `now ${number(now)} · peak ${number(max)}` })));
  return box;
}

function table(head, rows, numeric) {
  if (rows.length === 0) return el('p', { class: 'empty', text: 'none' });
  return el('div', { class: 'scroll' }, el('table', {},
    el('thead', {}, el('tr', {}, head.map((h, i) => el('th', { class: numeric.includes(i) ? 'num' : '', text: h })))),
    el('tbody', {}, rows)));
}

function tasksTable(tasks) {
  const rows = tasks.map((t) => el('tr', { 'data-task': t.id, 'data-state': t.state },
    el('td', { class: 'num', text: t.id }),
    el('td', {}, el('span', { class: 'state', 'data-state': t.state, text: t.state })),
    el('td', { text: t.worker_id || '' }),
    el('td', { class: 'trace', text: t.trace || '' })));
  return table(['task', 'state', 'process', 'error'], rows, [0]);
}

function partitionsTable(partitions) {
  const rows = partitions.map((p) => el('tr', { 'data-worker': p.worker_id || '' },
    el('td', { text: p.topic }),
    el('td', { class: 'num', text: p.partition }),
    el('td', { class: 'num', text: p.task }),
    el('td', { text: p.worker_id || '' }),
    el('td', { class: 'num', text: number(p.lag) })));
  return table(['topic', 'partition', 'task', 'process', 'lag'], rows, [1, 2, 4]);
}

function unreadTable(partitions) {
  const rows = partitions.map((p) => el('tr', { 'data-role': 'unread' },
    el('td', { text: p.topic }),
    el('td', { class: 'num', text: p.partition }),
    el('td', { text: clock(new Date(p.since)) }),
    el('td', { class: 'num', text: p.lag === null ? '?' : number(p.lag) })));
  return table(['topic', 'partition', 'unread since', 'lag'], rows, [1, 3]);
}

function processesTable(processes) {
  const rows = processes.map((p) => el('tr', { 'data-worker': p.worker_id },
    el('td', { text: p.worker_id }),
    el('td', { class: 'num', text: number(p.rows_per_second) }),
    el('td', { class: 'num', text: number(p.lag) })));
  return table(['process', 'rows/s (30 s)', 'lag'], rows, [1, 2]);
}

function pluginsTable(plugins) {
  const rows = plugins.map((p) => el('tr', {},
    el('td', { text: p.name }),
    el('td', { text: p.plugin || '' }),
    el('td', { class: 'num', text: number(p.calls) }),
    el('td', { class: 'num', text: p.call_seconds_mean === null ? '–' : (p.call_seconds_mean * 1000).toFixed(2) }),
    el('td', { class: 'num', text: p.call_seconds_total.toFixed(2) }),
    el('td', { class: 'num', text: number(p.failures) })));
  return table(['name', 'plugin', 'calls', 'mean ms', 'total s', 'failures'], rows, [2, 3, 4, 5]);
}

function lastError(error) {
  if (!error) return el('p', { class: 'empty', text: 'none since this process started' });
  return el('div', { class: 'last-error' },
    el('time', { datetime: new Date(error.at).toISOString(), text: new Date(error.at).toLocaleString() }),
    ' ', error.message);
}

document.addEventListener('DOMContentLoaded', () => {
  $('login').addEventListener('submit', (event) => {
    event.preventDefault();
    const token = $('token').value.trim();
    if (!token) return;
    page.token = token;
    sessionStorage.setItem(TOKEN_KEY, token);
    $('token').value = '';
    $('login-error').textContent = '';
    refresh();
  });
  $('forget').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    page.token = null;
    clearTimeout(page.timer);
    showLogin('');
  });
  window.addEventListener('hashchange', refresh);
  refresh();
});
