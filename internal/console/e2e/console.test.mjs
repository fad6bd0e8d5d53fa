// Browser tests of the console: playwright-core driving Debian's chromium against a
// running dispatchd. Run by `go test ./internal/console` (console_browser_test.go),
// which starts the server and sets BASE_URL, TOKEN and SHOTS (where screenshots go).
// Each step throws on a failure; the exit status is what the Go test checks.
import { chromium } from 'playwright-core';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { createHash } from 'node:crypto';

const base = process.env.BASE_URL;
const token = process.env.TOKEN;
const shots = process.env.SHOTS;
const artifactMaxBytes = Number(process.env.ARTIFACT_MAX_BYTES);
if (!base || !token) throw new Error('BASE_URL and TOKEN must be set');
if (shots) mkdirSync(shots, { recursive: true });

// api calls the server's admin or agent API directly, as an outside client would.
async function api(method, path, body, bearer = token) {
  const res = await fetch(base + path, {
    method,
    headers: { Authorization: 'Bearer ' + bearer, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update'],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const page = await context.newPage();
const errors = [];
page.on('pageerror', (e) => errors.push(e.message));
// A CSP violation is reported as a console error; failed loads of pages that answer an
// error status on purpose (401, 400, 422) are not errors of the page.
page.on('console', (m) => { if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) errors.push(m.text()); });
page.on('requestfailed', (r) => errors.push('request failed: ' + r.url()));
const shot = async (name) => { if (shots) await page.screenshot({ path: `${shots}/${name}.png`, fullPage: true }); };
const steps = [];
async function step(name, fn) {
  try {
    await fn();
    steps.push(name);
    console.log('ok   ' + name);
  } catch (e) {
    console.log('FAIL ' + name + ': ' + e.message);
    await page.screenshot({ path: `${shots || '/tmp'}/failed.png`, fullPage: true }).catch(() => {});
    throw e;
  }
}

try {
  await step('a wrong token is refused with a clear message', async () => {
    const res = await page.goto(base + '/console/');
    assert.match(page.url(), /\/console\/signin$/);
    assert.match(res.headers()['content-security-policy'], /script-src 'self'/);
    await shot('signin');
    await page.getByLabel('Admin token').fill('not-a-token');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('alert').filter({ hasText: 'not accepted' }).waitFor();
  });

  await step('sign in with the admin token', async () => {
    await page.getByLabel('Admin token').fill(token);
    await page.keyboard.press('Enter'); // the keyboard alone
    await page.getByRole('heading', { name: 'Dashboard' }).waitFor();
    await page.getByRole('row', { name: /Dispatched/ }).waitFor(); // zeros too, not an empty table
    const cookie = (await context.cookies()).find((c) => c.name === 'taskd_console');
    assert.ok(cookie.httpOnly, 'session cookie is HttpOnly');
    assert.ok(!cookie.value.includes(token), 'the session cookie is not the admin token');
    assert.equal(cookie.sameSite, 'Strict');
    await shot('dashboard');
  });

  let templateId;
  await step('create a template through the form', async () => {
    await page.getByRole('navigation').getByRole('link', { name: 'Templates' }).click();
    await page.getByLabel('Name').fill('crawl');
    await page.getByLabel('JSON Schema of the task params').fill(JSON.stringify({
      type: 'object', required: ['url'],
      properties: { url: { type: 'string', title: 'URL' }, depth: { type: 'integer', minimum: 1 } },
    }, null, 2));
    await page.getByRole('button', { name: 'Create template' }).click();
    const row = page.getByRole('row').filter({ hasText: 'crawl' });
    await row.waitFor();
    templateId = Number((await row.getByRole('cell').first().textContent()).trim());
    assert.ok(templateId > 0);
    await shot('templates');
  });

  await step('a schema that is not JSON is shown at its field', async () => {
    await page.getByLabel('Name').fill('broken');
    await page.getByLabel('JSON Schema of the task params').fill('{"type": ');
    await page.getByRole('button', { name: 'Create template' }).click();
    await page.locator('#schema-error').filter({ hasText: 'Not JSON' }).waitFor();
    assert.equal(await page.getByLabel('JSON Schema of the task params').getAttribute('aria-invalid'), 'true');
  });

  let taskPath;
  await step('a 422 is shown at its field of the form generated from the schema', async () => {
    await page.getByRole('row').filter({ hasText: 'crawl' }).getByRole('link', { name: 'New task' }).click();
    await page.getByLabel('Executor (uid_42 or gid_ops)').fill('uid_7');
    const start = new Date(Date.now() - 60_000).toISOString().slice(0, 16).replace('T', ' ');
    await page.getByLabel('Start (UTC, 24 h)').fill(start);
    await page.getByLabel('URL (required)').fill('http://example.com');
    await page.getByLabel('depth').fill('0');
    await page.getByRole('button', { name: 'Create task' }).click();
    const err = page.locator('#p-depth-error');
    await err.waitFor();
    assert.match(await err.textContent(), /minimum/);
    assert.equal(await page.getByLabel('depth').getAttribute('aria-invalid'), 'true');
    assert.equal(await page.getByLabel('URL (required)').inputValue(), 'http://example.com', 'what was typed stays');
    await shot('new-task-422');
  });

  await step('a required param left empty is shown at its field', async () => {
    await page.getByLabel('URL (required)').fill('');
    await page.getByLabel('depth').fill('2');
    await page.getByRole('button', { name: 'Create task' }).click();
    await page.locator('#p-url-error').filter({ hasText: 'Required' }).waitFor();
  });

  await step('params with <script> are shown as text', async () => {
    await page.getByLabel('URL (required)').fill('<script>window.__xss = 1</script>');
    await page.getByRole('button', { name: 'Create task' }).click();
    await page.locator('#task-status').waitFor();
    taskPath = new URL(page.url()).pathname;
    assert.match(await page.locator('#task-params').textContent(), /<script>window.__xss = 1<\/script>/);
    assert.equal(await page.evaluate(() => window.__xss), undefined);
    await shot('task');
  });
  const taskId = taskPath.split('/').slice(-2).join(':');

  await step('see the task on the schedule', async () => {
    await page.getByRole('link', { name: 'Schedule of uid_7' }).click();
    const row = page.getByRole('row').filter({ hasText: taskId });
    await row.waitFor();
    assert.match(await row.textContent(), /0\s*1$/); // claimed 0, remaining 1
    await shot('schedule');
  });

  await step('an agent fetches it over the API and the dispatch event appears', async () => {
    const key = await api('POST', '/v1/admin/clients/7/keys');
    assert.equal(key.status, 201);
    const got = await api('POST', '/v1/fetch', {}, key.body.client_key);
    assert.equal(got.status, 200);
    assert.equal(got.body.task.task_id, taskId);
    await page.goto(base + '/console/');
    assert.equal((await page.locator('#open-dispatches').textContent()).trim(), '1', 'the dashboard counts the open dispatch');
    assert.equal((await page.locator('#due-now').textContent()).trim(), '1', 'the task due a minute ago');
    const done = await api('POST', '/v1/complete', { log_id: got.body.task.log_id, result: 'success' }, key.body.client_key);
    assert.equal(done.status, 200);
    await page.goto(base + taskPath);
    await page.getByRole('link', { name: 'Events of this task' }).click();
    await page.getByRole('row').filter({ hasText: 'dispatch' }).filter({ hasText: taskId }).waitFor();
    await shot('events');
  });

  await step('edit it through the generated form, and as raw JSON', async () => {
    await page.goto(base + taskPath);
    await page.getByRole('link', { name: 'Edit' }).click();
    assert.equal(await page.getByLabel('URL (required)').inputValue(), '<script>window.__xss = 1</script>');
    await page.getByLabel('depth').fill('3');
    await page.getByLabel('Priority (1-9)').fill('7');
    await page.getByRole('button', { name: 'Save task' }).click();
    await page.locator('#task-params').filter({ hasText: '"depth":3' }).waitFor();
    await page.getByRole('link', { name: 'Edit' }).click();
    await page.getByRole('link', { name: 'Edit the params as raw JSON instead' }).click();
    await page.getByLabel('Params (JSON)').fill('{"url": "http://example.org", "depth": 4}');
    await page.getByRole('button', { name: 'Save task' }).click();
    await page.locator('#task-params').filter({ hasText: 'example.org' }).waitFor();
    const task = await api('GET', '/v1/admin/tasks/' + taskId.replace(':', '/'));
    assert.equal(task.body.priority, 7);
    assert.deepEqual(task.body.params, { url: 'http://example.org', depth: 4 });
  });

  await step('an edit keeps large numbers, seconds and the retry backoff', async () => {
    const created = await api('POST', '/v1/admin/tasks/once', { executor: 'uid_8', start_time: '2030-01-02T03:04:35Z',
      template_id: templateId, params: { url: 'http://x', depth: 1000000 }, dispatch_times: 1000000,
      lease_seconds: 60, max_attempts: 3, retry_backoff_seconds: 30 });
    assert.equal(created.status, 201);
    await page.goto(base + '/console/tasks/once/' + created.body.id);
    assert.match(await page.locator('dl').textContent(), /1000000 \(once_per_user\)/);
    await page.getByRole('link', { name: 'Edit' }).click();
    assert.equal(await page.getByLabel('depth').inputValue(), '1000000');
    await page.getByLabel('Priority (1-9)').fill('6');
    await page.getByRole('button', { name: 'Save task' }).click();
    await page.locator('#task-status').waitFor();
    const t = (await api('GET', '/v1/admin/tasks/once/' + created.body.id)).body;
    assert.deepEqual([t.priority, t.start_time, t.dispatch_times, t.retry_backoff_seconds, t.max_attempts, t.params.depth],
      [6, '2030-01-02T03:04:35Z', 1000000, 30, 3, 1000000]);
  });

  await step('times are entered and shown in UTC, 24 h; the edit form has every setting; the template by name', async () => {
    const created = await api('POST', '/v1/admin/tasks/once', { executor: 'uid_8', start_time: '2030-01-02T19:04:35Z',
      template_id: templateId, params: { url: 'http://x' }, retry_multiplier: 3, retry_max_seconds: 600, dispatch_rate_per_minute: 5 });
    assert.equal(created.status, 201);
    await page.goto(base + '/console/tasks/once/' + created.body.id);
    assert.match(await page.locator('dl').textContent(), /2030-01-02 19:04:35 UTC/);
    assert.equal((await page.locator('#task-template').textContent()).trim(), `crawl (${templateId})`);
    await page.getByRole('link', { name: 'Edit' }).click();
    const start = page.getByLabel('Start (UTC, 24 h)');
    assert.equal(await start.getAttribute('type'), 'text', 'not a datetime-local, whose display follows the locale');
    assert.equal(await start.inputValue(), '2030-01-02 19:04:35');
    assert.equal(await page.getByLabel(/Retry multiplier/).inputValue(), '3');
    assert.equal(await page.getByLabel(/Retry cap seconds/).inputValue(), '600');
    assert.equal(await page.getByLabel(/Rate: occurrences claimed per minute/).inputValue(), '5');
    await start.fill('2030-01-03 21:15:00');
    await page.getByLabel(/Retry multiplier/).fill('1.5');
    await page.getByLabel(/Retry cap seconds/).fill('900');
    await page.getByLabel(/Rate: occurrences claimed per minute/).fill('12');
    await page.getByRole('button', { name: 'Save task' }).click();
    await page.locator('#task-status').waitFor();
    assert.match(await page.locator('dl').textContent(), /2030-01-03 21:15:00 UTC/);
    assert.match(await page.locator('#task-rate').textContent(), /12/);
    const t = (await api('GET', '/v1/admin/tasks/once/' + created.body.id)).body;
    assert.deepEqual([t.start_time, t.retry_multiplier, t.retry_max_seconds, t.dispatch_rate_per_minute],
      ['2030-01-03T21:15:00Z', 1.5, 900, 12]);
    await page.goto(base + '/console/tasks?executor=uid_8');
    const row = page.getByRole('row').filter({ hasText: 'once:' + created.body.id });
    assert.match(await row.textContent(), new RegExp(`crawl \\(${templateId}\\)`), 'the task list names the template');
  });

  await step('a save that leaves the task going nowhere shows the warnings on the task page', async () => {
    const created = await api('POST', '/v1/admin/tasks/once', { executor: 'uid_8', start_time: '2030-01-02T19:04:35Z',
      template_id: templateId, params: { url: 'http://x' } });
    await page.goto(base + '/console/tasks/once/' + created.body.id + '/edit');
    await page.getByLabel('Executor (uid_42 or gid_ops)').fill('gid_nosuchgroup');
    await page.getByRole('button', { name: 'Save task' }).click();
    const warned = page.locator('#task-warnings');
    await warned.waitFor();
    assert.match(await warned.textContent(), /empty_group: gid_nosuchgroup has no members/);
    await shot('task-warnings');
    await page.reload(); // a plain visit: the warnings belonged to the save
    await page.goto(base + '/console/tasks/once/' + created.body.id);
    assert.equal(await page.locator('#task-warnings').count(), 0);
  });

  await step('the schedule of a rotating task is one row a day, not one per occurrence', async () => {
    const start = new Date(Date.now() - 30 * 60_000).toISOString().replace(/\.\d+Z$/, 'Z');
    const created = await api('POST', '/v1/admin/tasks/rotate', { executor: 'uid_19', start_time: start, space_minutes: 5,
      template_id: templateId, params: { url: 'http://x' } });
    assert.equal(created.status, 201);
    await page.goto(base + '/console/schedule?executor=uid_19');
    const rows = page.locator('table.timeline tbody tr');
    await rows.first().waitFor();
    const n = await rows.count();
    assert.ok(n <= 9, `${n} rows for one task over 8 days`);
    assert.match(await rows.first().textContent(), /every 5 min/);
    assert.match(await page.locator('main > p').first().textContent(), /^\d{4} occurrences|^\d{3,} occurrences/);
    await shot('schedule-rotating');
  });

  await step('a cron task in a time zone: a bad zone at its field, then its wall times beside UTC', async () => {
    await page.goto(base + '/console/tasks/new?template=' + templateId + '&kind=rotate&raw=1');
    await page.getByLabel('Executor (uid_42 or gid_ops)').fill('uid_20');
    await page.getByLabel('Start (UTC, 24 h)').fill('2026-01-01 00:00');
    await page.getByLabel(/^Or, instead, a cron expression/).fill('30 2 * * *');
    await page.getByLabel(/^Time zone of the cron/).fill('Europe/Berlinn');
    await page.locator('textarea[name=params]').fill('{"url": "http://x"}');
    await page.getByRole('button', { name: 'Create task' }).click();
    await page.locator('#time_zone-error').filter({ hasText: 'unknown time zone' }).waitFor();
    assert.equal(await page.getByLabel(/^Or, instead, a cron expression/).inputValue(), '30 2 * * *', 'what was typed stays');
    await page.getByLabel(/^Time zone of the cron/).fill('Europe/Berlin');
    await page.getByLabel('A user who missed occurrences gets').selectOption('latest');
    await page.getByRole('button', { name: 'Create task' }).click();
    await page.locator('#task-cron').filter({ hasText: '30 2 * * * in Europe/Berlin' }).waitFor();
    assert.equal(await page.locator('#task-misfire').textContent(), 'latest');
    await shot('task-cron');
    await page.getByRole('link', { name: 'Schedule of uid_20' }).click();
    const row = page.locator('table.timeline tbody tr').first();
    await row.waitFor();
    // 02:30 in Berlin is 01:30 UTC in winter, 00:30 UTC in summer.
    assert.match(await row.textContent(), /0[01]:30:00/);
    assert.match(await row.textContent(), /02:30 \+0[12]:00 \(Europe\/Berlin\)/);
    await shot('schedule-cron');
  });

  await step('a save after someone else changed the task shows the change, not an overwrite', async () => {
    const created = await api('POST', '/v1/admin/tasks/once', { executor: 'uid_8', start_time: '2030-01-02T03:04:35Z',
      template_id: templateId, params: { url: 'http://x' }, priority: 2 });
    assert.equal(created.status, 201);
    await page.goto(base + '/console/tasks/once/' + created.body.id + '/edit');
    await page.getByLabel('Priority (1-9)').fill('4');
    // Another admin changes the task while this form is open.
    assert.equal((await api('PATCH', '/v1/admin/tasks/once/' + created.body.id, { priority: 9 })).status, 200);
    await page.getByRole('button', { name: 'Save task' }).click();
    await page.getByRole('alert').filter({ hasText: 'changed since you opened it' }).waitFor();
    assert.equal(await page.getByLabel('Priority (1-9)').inputValue(), '4', 'the values entered stay');
    assert.match(await page.locator('#priority-error').textContent(), /Now: 9/);
    assert.equal((await api('GET', '/v1/admin/tasks/once/' + created.body.id)).body.priority, 9, 'nothing was saved');
    await shot('task-conflict');
    await page.getByRole('button', { name: 'Save task' }).click(); // seen: saved against the current version
    await page.locator('#task-status').waitFor();
    assert.equal((await api('GET', '/v1/admin/tasks/once/' + created.body.id)).body.priority, 4);
  });

  await step('pause it and see the audit entry', async () => {
    await page.goto(base + taskPath);
    await page.getByRole('button', { name: 'Pause' }).click();
    await page.locator('#task-status').filter({ hasText: 'paused' }).waitFor();
    await page.getByRole('navigation').getByRole('link', { name: 'Audit log' }).click();
    const first = page.getByRole('row').nth(1);
    assert.match(await first.textContent(), new RegExp(taskId));
    assert.match(await first.textContent(), /ops/); // the actor: the token's name
    await shot('audit');
  });

  await step('statistics: charts and the per-task table', async () => {
    await page.getByRole('navigation').getByRole('link', { name: 'Statistics' }).click();
    const row = page.getByRole('row').filter({ hasText: taskId });
    await row.waitFor();
    assert.match(await row.textContent(), new RegExp(taskId + '\\s*1\\s*1\\s*0')); // dispatched, completed, failed
    assert.equal(await page.getByRole('img', { name: /Dispatches and completions per hour/ }).count(), 1);
    assert.equal(await page.getByRole('img', { name: /Latency/ }).count(), 1);
    await page.getByRole('link', { name: 'last 7 days' }).click();
    await page.getByRole('img', { name: /per 12 hours, last 7 days/ }).waitFor();
    await page.getByRole('link', { name: 'last 24 hours' }).click();
    await shot('stats');
  });

  await step('groups: add members, remove one', async () => {
    await page.getByRole('navigation').getByRole('link', { name: 'Groups' }).click();
    await page.getByLabel('Group id').fill('crawlers');
    await page.getByRole('button', { name: 'Show members' }).click();
    await page.getByLabel('Add users (ids, separated by commas, spaces or lines)').fill('7, 8\n9');
    await page.getByRole('button', { name: 'Add to gid_crawlers' }).click();
    await page.getByRole('cell', { name: 'uid_9', exact: true }).waitFor();
    await page.getByRole('button', { name: 'Remove uid_8 from the group' }).click();
    await page.getByRole('cell', { name: 'uid_7', exact: true }).waitFor();
    assert.equal(await page.getByRole('cell', { name: 'uid_8', exact: true }).count(), 0);
    const members = await api('GET', '/v1/admin/groups/crawlers/members');
    assert.deepEqual(members.body.uids.sort(), ['7', '9']);
    await shot('groups');
  });

  await step('clients: issue a key, shown once; revoke it', async () => {
    await page.getByRole('navigation').getByRole('link', { name: 'Clients' }).click();
    await page.getByLabel('User id').fill('9');
    await page.getByRole('button', { name: 'Show' }).click();
    await page.getByRole('button', { name: 'Issue a key for uid_9' }).click();
    const key = await page.getByLabel('Client key').inputValue();
    assert.match(key, /^9\./);
    await shot('clients');
    await page.reload(); // shows the key no more, and issues no other
    assert.equal(await page.getByLabel('Client key').count(), 0);
    assert.equal((await api('POST', '/v1/fetch', {}, key)).status, 200);
    await page.getByRole('button', { name: 'Revoke every key of uid_9' }).click();
    await page.locator('#revoked').waitFor();
    assert.equal((await api('POST', '/v1/fetch', {}, key)).status, 401);
  });

  await step('campaigns: create one, start it, an agent takes an item, pause it', async () => {
    await page.getByRole('navigation').getByRole('link', { name: 'Campaigns' }).click();
    await page.getByLabel('Name', { exact: true }).fill('recall');
    await page.getByLabel('Template id', { exact: true }).fill(String(templateId));
    await page.getByLabel('Params (JSON)', { exact: true }).fill('{"url": "http://x"}');
    await page.getByLabel('Executor (uid_… or gid_…)', { exact: true }).fill('uid_9');
    await page.getByLabel('Items (a count)', { exact: true }).fill('3');
    await page.getByRole('button', { name: 'Create campaign' }).click();
    await page.getByRole('button', { name: 'start campaign recall' }).click();
    // The start's page is loaded before the reload below: a reload during its
    // navigation finds no page to reload (seen on a loaded machine).
    await page.getByRole('button', { name: 'pause campaign recall' }).waitFor();
    const key = (await api('POST', '/v1/admin/clients/9/keys')).body.client_key;
    const got = await api('POST', '/v1/fetch', {}, key);
    assert.match(got.body.task.task_id, /^campaign:\d+$/);
    assert.equal(got.body.task.item, 0);
    await page.reload();
    await page.getByRole('cell', { name: 'running', exact: true }).waitFor();
    await page.getByRole('button', { name: 'pause campaign recall' }).click();
    await page.getByRole('button', { name: 'resume campaign recall' }).waitFor();
    assert.equal(await page.getByRole('button', { name: 'pause campaign recall' }).count(), 0);
    await shot('campaigns');
  });

  await step('rollouts: set one on a task, its phase bar and gate; the dashboard lists it waiting; advance it', async () => {
    await api('PUT', '/v1/admin/groups/rg/members', { uids: ['r1', 'r2', 'r3', 'r4'] });
    const start = new Date(Date.now() - 60000).toISOString().replace(/\.\d+Z$/, 'Z');
    const task = (await api('POST', '/v1/admin/tasks/once', { executor: 'gid_rg', start_time: start, template_id: templateId,
      params: { url: 'http://x' }, dispatch_times: 4 })).body;
    await page.goto(base + '/console/tasks/once/' + task.id);
    await page.getByLabel(/^Rollout \(JSON/).fill(JSON.stringify({ phases: [{ count: 1 }, { percent: 100 }],
      gate: { min_finished: 1, success_ratio: 1 }, advance: 'manual' }));
    await page.getByRole('button', { name: 'Save rollout' }).click();
    await page.locator('#rollout-state').filter({ hasText: 'running' }).waitFor();
    assert.equal(await page.locator('.phase-bar .phase.current').innerText(), 'Phase 1: up to 1');
    const key = (await api('POST', '/v1/admin/clients/r1/keys')).body.client_key;
    const got = await api('POST', '/v1/fetch', {}, key);
    assert.equal(got.body.task.task_id, task.task_id);
    const other = (await api('POST', '/v1/admin/clients/r2/keys')).body.client_key;
    assert.equal((await api('POST', '/v1/fetch', {}, other)).body.task, null, 'phase 1 gave its one slot');
    await api('POST', '/v1/complete', { log_id: got.body.task.log_id, result: 'success' }, key);
    await page.goto(base + '/console/');
    await page.locator('#active-rollouts').getByRole('cell', { name: /waiting/ }).waitFor();
    await page.locator('#active-rollouts').getByRole('link', { name: task.task_id }).click();
    await page.locator('#rollout-gate').filter({ hasText: 'passed' }).waitFor();
    await shot('rollout');
    await page.getByRole('button', { name: 'advance' }).click();
    await page.locator('#rollout-state').filter({ hasText: 'running' }).waitFor();
    assert.equal(await page.locator('.phase-bar .phase.current').innerText(), 'Phase 2: 100%');
    assert.equal((await api('POST', '/v1/fetch', {}, other)).body.task.task_id, task.task_id);
  });

  await step('a rollout whose gate cannot be met is marked on the dashboard', async () => {
    await api('PUT', '/v1/admin/groups/sg/members', { uids: ['s1', 's2', 's3'] });
    const start = new Date(Date.now() + 3600_000).toISOString().replace(/\.\d+Z$/, 'Z');
    const body = { executor: 'gid_sg', start_time: start, template_id: templateId, params: { url: 'http://x' }, dispatch_times: 3,
      rollout: { phases: [{ count: 1 }, { percent: 100 }], gate: { min_finished: 2 } } };
    const refused = await api('POST', '/v1/admin/tasks/once', body);
    assert.equal(refused.status, 400, 'auto: a first phase of 1 slot for a gate of 2 never advances');
    assert.equal(refused.body.error.details.reason, 'gate_unreachable');
    body.rollout.advance = 'manual';
    const task = await api('POST', '/v1/admin/tasks/once', body);
    assert.equal(task.status, 201);
    assert.ok(task.body.warnings.some((w) => w.code === 'gate_unreachable'));
    await page.goto(base + '/console/');
    const row = page.locator('#active-rollouts tr').filter({ hasText: task.body.task_id });
    assert.match(await row.textContent(), /gate cannot be met/);
  });

  await step('a finished once task shows its outcome in the list; no rate says no limit', async () => {
    const start = new Date(Date.now() - 60_000).toISOString().replace(/\.\d+Z$/, 'Z');
    const task = (await api('POST', '/v1/admin/tasks/once', { executor: 'uid_oc1', start_time: start, template_id: templateId,
      params: { url: 'http://x' } })).body;
    await page.goto(base + '/console/tasks/once/' + task.id);
    assert.equal((await page.locator('#task-rate').textContent()).trim(), 'no limit');
    const key = (await api('POST', '/v1/admin/clients/oc1/keys')).body.client_key;
    const got = await api('POST', '/v1/fetch', {}, key);
    assert.equal(got.body.task.task_id, task.task_id);
    await page.goto(base + '/console/tasks?executor=uid_oc1');
    const row = page.getByRole('row').filter({ hasText: task.task_id });
    assert.match(await row.locator('td.outcome').textContent(), /live/, 'open: still live');
    await api('POST', '/v1/complete', { log_id: got.body.task.log_id, result: 'success' }, key);
    await page.reload();
    assert.equal((await row.locator('td.outcome').textContent()).trim(), 'done');
  });

  await step('a campaign paused by its error budget stands out on the dashboard; its page shows the failures with their detail', async () => {
    const created = await api('POST', '/v1/admin/campaigns', { name: 'flaky', template_id: templateId, params: { url: 'http://x' },
      executor: 'uid_77', items: { count: 5 }, max_attempts: 3, error_budget: { max_failures: 1, per_seconds: 3600 } });
    assert.equal(created.status, 201);
    const id = created.body.id;
    assert.equal((await api('POST', `/v1/admin/campaigns/${id}/start`)).status, 200);
    const key = (await api('POST', '/v1/admin/clients/77/keys')).body.client_key;
    for (const n of [1, 2]) {
      const got = await api('POST', '/v1/fetch', {}, key);
      assert.equal(got.body.task.task_id, `campaign:${id}`);
      const done = await api('POST', '/v1/complete', { log_id: got.body.task.log_id, result: 'failure', detail: { error: `upstream 503 #${n}` } }, key);
      assert.equal(done.status, 200);
    }
    await page.getByRole('navigation').getByRole('link', { name: 'Dashboard' }).click();
    await page.locator('#nodes').getByRole('cell', { name: 'console-test', exact: true }).waitFor();
    const row = page.locator('#active-campaigns tr.warn', { hasText: 'flaky' });
    await row.getByText('by its error budget').waitFor();
    await shot('dashboard');
    await row.getByRole('link', { name: 'flaky' }).click();
    await page.locator('#budget-paused').waitFor();
    assert.equal(await page.locator('#failed-for-good').textContent(), '0');
    assert.match(await page.locator('#budget-failures').textContent(), /^2 \(pauses above 1\)/);
    const rows = page.locator('#failures tbody tr');
    assert.equal(await rows.count(), 2);
    await rows.first().getByText('{"error":"upstream 503 #2"}').waitFor();
    await rows.first().getByRole('cell', { name: 'retried', exact: true }).waitFor();
    await shot('campaign');
    await page.getByRole('button', { name: 'resume campaign flaky' }).click();
    await page.getByRole('button', { name: 'pause campaign flaky' }).waitFor();
    assert.equal(await page.locator('#budget-paused').count(), 0);
  });

  // reloadUntil reloads the page until the locator shows: the nodes write polls to MySQL
  // in batches (the test server flushes often), so a poll shows a moment later.
  async function reloadUntil(locator) {
    for (let i = 0; i < 100 && await locator.count() === 0; i++) {
      await page.waitForTimeout(100);
      await page.reload();
    }
    await locator.first().waitFor();
  }

  await step('the fleet: who polls, filtered by label and "not seen for"; a client\'s page with its agent, dispatches and settings', async () => {
    const now = new Date(Date.now() - 60_000).toISOString().replace(/\.\d+Z$/, 'Z');
    await api('POST', '/v1/admin/tasks/once', { executor: 'uid_21', start_time: now, template_id: templateId, params: { url: 'http://fleet' } });
    const k21 = (await api('POST', '/v1/admin/clients/21/keys')).body.client_key;
    const k22 = (await api('POST', '/v1/admin/clients/22/keys')).body.client_key;
    await api('POST', '/v1/admin/clients/23/keys'); // never polls
    const got = await api('POST', '/v1/fetch', { agent: { version: '2.0.1', hostname: 'edge-21', labels: { region: 'eu', rack: 'r1' } } }, k21);
    assert.equal(got.body.task.task_id.startsWith('once:'), true);
    assert.equal((await api('POST', '/v1/complete', { log_id: got.body.task.log_id, result: 'failure', detail: { reason: 'disk full' } }, k21)).status, 200);
    assert.equal((await api('POST', '/v1/fetch', { agent: { version: '1.9.0', hostname: 'edge-22', labels: { region: 'us' } } }, k22)).status, 200);

    await page.getByRole('navigation').getByRole('link', { name: 'Clients' }).click();
    await reloadUntil(page.getByRole('row').filter({ hasText: 'uid_21' }).filter({ hasText: '2.0.1' }));
    assert.match(await page.getByRole('row').filter({ hasText: 'uid_23' }).textContent(), /never/);
    await page.getByLabel('Label (key=value)').fill('region=eu');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.getByRole('row').filter({ hasText: 'uid_21' }).waitFor();
    assert.equal(await page.getByRole('row').filter({ hasText: 'uid_22' }).count(), 0, 'region=us is filtered out');
    await shot('fleet');
    await page.getByLabel('Label (key=value)').fill('');
    await page.getByLabel('Not seen for').selectOption('1h');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.getByRole('row').filter({ hasText: 'uid_23' }).waitFor();
    assert.equal(await page.getByRole('row').filter({ hasText: 'uid_21' }).count(), 0, 'seen a moment ago');

    await page.goto(base + '/console/clients?uid=21');
    assert.equal((await page.locator('#agent-version').textContent()).trim(), '2.0.1');
    assert.notEqual((await page.locator('#last-seen').textContent()).trim(), 'never');
    const row = page.getByRole('row').filter({ hasText: got.body.task.task_id });
    assert.match(await row.textContent(), /failure/);
    assert.match(await row.textContent(), /disk full/);
    await page.getByLabel('Max in flight (dispatches open at once, 1 to 100)').fill('5');
    await page.getByRole('button', { name: 'Save settings' }).click();
    await page.locator('#saved').waitFor();
    assert.equal((await api('GET', '/v1/admin/clients/21')).body.max_in_flight, 5);
    await page.getByLabel('Max in flight (dispatches open at once, 1 to 100)').fill('500');
    await page.getByLabel('Max in flight (dispatches open at once, 1 to 100)').evaluate((e) => e.removeAttribute('max'));
    await page.getByRole('button', { name: 'Save settings' }).click();
    await page.locator('#mif-error').filter({ hasText: 'max_in_flight' }).waitFor();
    await shot('client');

    await page.getByRole('navigation').getByRole('link', { name: 'Statistics' }).click();
    assert.match(await page.getByRole('row').filter({ hasText: '2.0.1' }).textContent(), /2\.0\.1\s*1\s*1\s*0\s*1/); // users, dispatched, completed, failed
  });

  await step('groups: the list, with a group whose tasks go nowhere standing out', async () => {
    const start = new Date(Date.now() + 3600_000).toISOString().replace(/\.\d+Z$/, 'Z');
    await api('POST', '/v1/admin/tasks/once', { executor: 'gid_nobody', start_time: start, template_id: templateId, params: { url: 'http://x' } });
    await page.getByRole('navigation').getByRole('link', { name: 'Groups' }).click();
    assert.match(await page.getByRole('row').filter({ hasText: 'gid_nobody' }).textContent(), /no members/);
    assert.match(await page.getByRole('row').filter({ hasText: 'gid_crawlers' }).textContent(), /gid_crawlers\s*2/);
    await shot('groups-list');
    await page.getByRole('link', { name: 'gid_crawlers' }).click();
    await page.getByRole('cell', { name: 'uid_9', exact: true }).waitFor();
  });

  await step('groups: a dynamic group made by its rule follows the agents\' reports; the fleet filtered by the same selector', async () => {
    await page.getByRole('navigation').getByRole('link', { name: 'Groups' }).click();
    await page.getByLabel('Group id').fill('eu');
    await page.getByRole('button', { name: 'Show members' }).click();
    await page.getByLabel(/Label selector/).fill('region in (eu');
    await page.getByRole('button', { name: 'Make gid_eu dynamic' }).click();
    await page.locator('#rule-error').filter({ hasText: 'selector' }).waitFor();
    await page.getByLabel(/Label selector/).fill('region=nowhere');
    await page.getByRole('button', { name: 'Make gid_eu dynamic' }).click();
    await page.locator('#empty-group').waitFor(); // the reply's empty_group warning
    await page.getByLabel(/Label selector/).fill('region=eu');
    await page.getByLabel(/Agent version/).fill('>=2');
    await page.getByRole('button', { name: 'Change the rule' }).click();
    await page.getByRole('heading', { name: /Dynamic group/ }).waitFor();
    await page.getByRole('cell', { name: 'uid_21', exact: true }).waitFor(); // 2.0.1 in eu, reported in the fleet step
    assert.equal(await page.getByRole('cell', { name: 'uid_22', exact: true }).count(), 0, '1.9.0 in us');
    assert.equal(await page.getByRole('button', { name: /Add to gid_eu/ }).count(), 0, 'no members by hand');
    assert.equal(await page.getByRole('button', { name: /Remove uid_21/ }).count(), 0, 'no members by hand');
    await shot('group-dynamic');
    const g = await api('GET', '/v1/admin/groups/eu');
    assert.equal(g.body.dynamic, true);
    assert.equal(g.body.members, 1);

    await page.getByRole('navigation').getByRole('link', { name: 'Groups' }).click();
    assert.match(await page.getByRole('row').filter({ hasText: 'gid_eu' }).textContent(), /dynamic: region=eu version >=2/);

    await page.getByRole('navigation').getByRole('link', { name: 'Clients' }).click();
    await page.getByLabel('Selector').fill('region!=eu');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.getByRole('row').filter({ hasText: 'uid_22' }).waitFor();
    assert.equal(await page.getByRole('row').filter({ hasText: 'uid_21' }).count(), 0, 'region=eu is filtered out');

    await page.goto(base + '/console/groups?gid=eu');
    await page.getByRole('button', { name: /Delete gid_eu/ }).click();
    await page.getByRole('heading', { name: 'Groups' }).first().waitFor();
    assert.equal((await api('GET', '/v1/admin/groups/eu')).status, 404);
  });

  // ddi is a hawkBit DDI controller's request (SWUpdate's, say) with its target token.
  async function ddi(method, path, key, body) {
    const res = await fetch(path.startsWith('http') ? path : base + path, {
      method,
      headers: { Authorization: 'TargetToken ' + key, ...(body ? { 'Content-Type': 'application/json' } : {}) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : null };
  }
  // feedback is a DDI feedback body as SWUpdate sends it.
  const feedback = (id, execution, finished, progress, ...details) => ({ id, time: '20260301T120000',
    status: { execution, result: { finished, ...(progress ? { progress } : {}) }, details } });

  const firmware = Buffer.alloc(40_000, 'swu!');
  let artifactId;
  await step('artifacts: upload one through the page and see it listed; one over the limit shows the server\'s message', async () => {
    await page.getByRole('navigation').getByRole('link', { name: 'Artifacts' }).click();
    await page.getByLabel('File', { exact: true }).setInputFiles({ name: 'fw-1.0.swu', mimeType: 'application/octet-stream', buffer: firmware });
    await page.getByRole('button', { name: 'Upload' }).click();
    await page.locator('#artifact-uploaded').filter({ hasText: 'Uploaded fw-1.0.swu as artifact' }).waitFor();
    const row = page.getByRole('row').filter({ hasText: 'fw-1.0.swu' });
    const text = await row.textContent();
    assert.match(text, /39\.1 KiB/);
    assert.match(text, new RegExp(createHash('sha256').update(firmware).digest('hex').slice(0, 12)));
    artifactId = Number((await row.getByRole('cell').first().textContent()).trim());
    const stored = await api('GET', '/v1/admin/artifacts/' + artifactId);
    assert.equal(stored.body.size, firmware.length);
    assert.equal(stored.body.hashes.sha1, createHash('sha1').update(firmware).digest('hex'));
    await shot('artifacts');
    // Twice the limit: the refusal comes while more of the upload is unsent than net/http
    // reads after a reply, and the browser shows it all the same.
    await page.getByLabel('File', { exact: true }).setInputFiles({ name: 'huge.swu', mimeType: 'application/octet-stream',
      buffer: Buffer.alloc(artifactMaxBytes * 2) });
    await page.getByRole('button', { name: 'Upload' }).click();
    await page.locator('#artifact-error').filter({ hasText: `Not uploaded: artifact: over ${artifactMaxBytes} bytes` }).waitFor();
    assert.equal(await page.getByRole('row').filter({ hasText: 'huge.swu' }).count(), 0);
    assert.equal((await api('GET', '/v1/admin/artifacts')).body.artifacts.length, 1, 'nothing of the refused upload is kept');
  });

  let ddiTaskId, ddiTaskPath;
  await step('a DDI template through the form (the checkbox hides the schema), and a task of it naming the artifact', async () => {
    await page.getByRole('navigation').getByRole('link', { name: 'Templates' }).click();
    await page.getByLabel('Name').fill('firmware');
    const schema = page.getByLabel('JSON Schema of the task params');
    assert.ok(await schema.isVisible());
    await page.getByLabel('DDI deployment (hawkBit devices)').check();
    assert.ok(await schema.isHidden(), 'the schema is the server\'s');
    await page.getByRole('button', { name: 'Create template' }).click();
    const row = page.getByRole('row').filter({ hasText: 'firmware' });
    assert.match(await row.textContent(), /ddi: true/);
    await shot('templates-ddi');
    await row.getByRole('link', { name: 'New task' }).click();
    const params = JSON.parse(await page.getByLabel('Params (JSON)').inputValue());
    assert.equal(params.chunks[0].artifacts[0].artifact_id, artifactId, 'the form offers the newest artifact');
    await page.getByLabel('Executor (uid_42 or gid_ops)').fill('uid_dev1');
    await page.getByLabel('Start (UTC, 24 h)').fill(new Date(Date.now() - 60_000).toISOString().slice(0, 16).replace('T', ' '));
    await page.getByLabel('Params (JSON)').fill(JSON.stringify({ chunks: [{ part: 'os', name: 'fw', version: '1.0',
      artifacts: [{ artifact_id: artifactId }, { filename: 'notes.txt', size: 2048, url: 'https://files.example.com/notes.txt',
        hashes: { sha1: 'a'.repeat(40) } }] }] }));
    await page.getByRole('button', { name: 'Create task' }).click();
    await page.locator('#task-status').waitFor();
    ddiTaskPath = new URL(page.url()).pathname;
    ddiTaskId = ddiTaskPath.split('/').slice(-2).join(':');
    const chunk = page.locator('#deployment-chunks tbody tr');
    assert.match(await chunk.textContent(), /os\s*fw\s*1\.0/);
    assert.equal(await chunk.getByRole('link', { name: 'fw-1.0.swu' }).getAttribute('href'), '/console/artifacts/' + artifactId);
    assert.match(await chunk.textContent(), /fw-1\.0\.swu, 39\.1 KiB/);
    assert.equal(await chunk.getByRole('link', { name: 'notes.txt' }).getAttribute('href'), 'https://files.example.com/notes.txt');
    const device = page.locator('#deployment-devices tbody tr');
    assert.match(await device.textContent(), /dev1\s*waiting\s*has not polled for it yet/);
  });

  await step('a fake DDI controller takes the deployment: waiting, downloading, then installed and waiting for its reboot', async () => {
    const key = (await api('POST', '/v1/admin/clients/dev1/keys')).body.client_key;
    const controller = '/ddi/DEFAULT/controller/v1/dev1';
    const poll = await ddi('GET', controller, key);
    assert.equal(poll.status, 200);
    const href = poll.body._links.deploymentBase.href;
    const action = Number(href.split('/').pop());
    const dep = await ddi('GET', href, key);
    assert.equal(dep.status, 200);
    assert.equal(dep.body.deployment.chunks[0].artifacts[0].filename, 'fw-1.0.swu');
    const state = page.locator('#deployment-devices tbody tr').filter({ hasText: 'dev1' }).locator('td.ddi-state');
    await page.goto(base + ddiTaskPath);
    assert.equal((await state.textContent()).trim(), 'waiting');

    const path = `${controller}/deploymentBase/${action}/feedback`;
    assert.equal((await ddi('POST', path, key, feedback(action, 'download', 'none', { cnt: 1, of: 2 }, 'Downloading fw-1.0.swu'))).status, 200);
    await page.reload();
    assert.equal((await state.textContent()).trim(), 'downloading');
    assert.match(await page.locator('#deployment-devices tbody tr').textContent(), /1 of 2; Downloading fw-1\.0\.swu/);

    assert.equal((await ddi('POST', path, key, feedback(action, 'proceeding', 'none', { cnt: 2, of: 2 }, 'Installation in progress', 'All Chunks Installed.'))).status, 200);
    await page.reload();
    assert.equal((await state.textContent()).trim(), 'installed, waiting for reboot');
    await shot('task-ddi');
  });

  await step('the artifact a task names is not deleted: the refusal names the task', async () => {
    await page.getByRole('navigation').getByRole('link', { name: 'Artifacts' }).click();
    await page.getByRole('link', { name: 'Delete artifact fw-1.0.swu' }).click();
    await page.getByRole('button', { name: 'Delete artifact fw-1.0.swu' }).click();
    await page.locator('#artifact-error').filter({ hasText: `Artifact ${artifactId} was not deleted: artifact ${artifactId} is in use by task(s) ${ddiTaskId}` }).waitFor();
    assert.equal(await page.locator('#artifact-users').getByRole('link', { name: ddiTaskId }).getAttribute('href'), ddiTaskPath);
    assert.equal((await api('GET', '/v1/admin/artifacts/' + artifactId)).status, 200);
    await shot('artifact-in-use');
  });

  await step('back from its reboot, the controller closes the action: done', async () => {
    const key = (await api('POST', '/v1/admin/clients/dev1/keys')).body.client_key;
    const poll = await ddi('GET', '/ddi/DEFAULT/controller/v1/dev1', key);
    const action = Number(poll.body._links.deploymentBase.href.split('/').pop());
    const closed = await ddi('POST', `/ddi/DEFAULT/controller/v1/dev1/deploymentBase/${action}/feedback`, key,
      feedback(action, 'closed', 'success', null, 'Update succeeded'));
    assert.equal(closed.status, 200);
    await page.goto(base + ddiTaskPath);
    const device = page.locator('#deployment-devices tbody tr').filter({ hasText: 'dev1' });
    assert.equal((await device.locator('td.ddi-state').textContent()).trim(), 'done');
    assert.match(await device.textContent(), /Update succeeded/);
  });

  await step('a sign-in form without its CSRF token is refused', async () => {
    const res = await page.request.post(base + '/console/signin', { form: { token, signin: 'forged' }, maxRedirects: 0 });
    assert.equal(res.status(), 400);
    assert.match(await res.text(), /out of date/);
  });

  await step('a form without its CSRF token is refused', async () => {
    const res = await page.request.post(base + taskPath + '/delete', { form: { csrf: 'forged' }, maxRedirects: 0 });
    assert.equal(res.status(), 403);
    const task = await api('GET', '/v1/admin/tasks/' + taskId.replace(':', '/'));
    assert.equal(task.body.status, 'paused');
  });

  await step('delete a task after confirming', async () => {
    const t = await api('POST', '/v1/admin/tasks/once', { executor: 'uid_5', start_time: new Date(Date.now() + 3600_000).toISOString().replace(/\.\d+Z$/, 'Z'), template_id: templateId, params: { url: 'http://x' } });
    await page.goto(base + '/console/tasks/once/' + t.body.id);
    await page.getByRole('link', { name: 'Delete' }).click();
    await page.getByRole('link', { name: 'Cancel' }).click();
    assert.equal((await api('GET', '/v1/admin/tasks/once/' + t.body.id)).body.status, 'active', 'cancel deletes nothing');
    await page.getByRole('link', { name: 'Delete' }).click();
    await page.getByRole('button', { name: 'Delete task once:' + t.body.id }).click();
    await page.getByRole('heading', { name: 'Tasks' }).waitFor();
    const deleted = await api('GET', '/v1/admin/tasks?status=deleted&limit=500');
    assert.ok(deleted.body.tasks.some((d) => d.id === t.body.id), 'the task is listed as deleted');
  });

  await step('page through 250 tasks', async () => {
    const bulk = await api('POST', '/v1/admin/templates', { name: 'bulk', schema: { type: 'object' } });
    const start = new Date(Date.now() + 3600_000).toISOString().replace(/\.\d+Z$/, 'Z');
    for (let i = 0; i < 250; i += 25) {
      await Promise.all(Array.from({ length: 25 }, (_, j) => api('POST', '/v1/admin/tasks/once',
        { executor: 'uid_' + (i + j), start_time: start, template_id: bulk.body.id, params: {} })
        .then((r) => assert.equal(r.status, 201))));
    }
    await page.goto(base + '/console/tasks');
    await page.getByLabel('Template id').fill(String(bulk.body.id));
    await page.getByRole('button', { name: 'Filter' }).click();
    const seen = new Set();
    for (let pages = 1; ; pages++) {
      await page.getByRole('table').waitFor();
      for (const link of await page.locator('tbody a').allTextContents()) seen.add(link);
      if (pages === 1) await shot('tasks');
      const next = page.getByRole('link', { name: 'Next page' });
      if (await next.count() === 0) break;
      assert.ok(pages < 10, 'paging does not end');
      await next.click();
    }
    assert.equal(seen.size, 250);
  });

  await step('readable at 390 px wide', async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(base + '/console/tasks');
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `the page is ${overflow}px wider than the screen`);
    await shot('tasks-390');
    await page.goto(base + '/console/');
    const cut = await page.evaluate(() => [...document.querySelectorAll('.scroll, .tiles')]
      .filter((el) => el.scrollWidth > el.clientWidth).map((el) => el.id || el.className));
    assert.deepEqual(cut, [], 'no part of the dashboard is cut off or scrolls sideways at 390 px');
    const overflow2 = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow2 <= 0, `the dashboard is ${overflow2}px wider than the screen`);
    await shot('dashboard-390');
    await page.setViewportSize({ width: 1280, height: 900 });
  });

  await step('an unknown session returns to sign-in with a message', async () => {
    const url = new URL(base);
    await context.addCookies([{ name: 'taskd_console', value: 'made-up-session', domain: url.hostname, path: '/console/', httpOnly: true, sameSite: 'Strict' }]);
    await page.goto(base + '/console/tasks');
    assert.match(page.url(), /\/console\/signin\?m=ended$/);
    await page.getByRole('alert').filter({ hasText: 'session has ended' }).waitFor();
  });

  await step('sign out ends the session: its cookie and CSRF token no longer work', async () => {
    await page.getByLabel('Admin token').fill(token);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Dashboard' }).waitFor();
    const old = (await context.cookies()).find((c) => c.name === 'taskd_console');
    const csrf = await page.locator('input[name="csrf"]').first().inputValue();
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByText('You are signed out.').waitFor();
    await page.goto(base + '/console/');
    assert.match(page.url(), /\/console\/signin$/);
    await context.addCookies([old]); // as if it had been copied before the sign-out
    await page.goto(base + '/console/tasks');
    assert.match(page.url(), /\/console\/signin\?m=ended$/);
    await context.addCookies([old]);
    const res = await page.request.post(base + '/console/templates',
      { form: { csrf, name: 'after-signout', schema: '{"type": "object"}' }, maxRedirects: 0 });
    assert.equal(res.status(), 303);
    assert.equal(res.headers()['location'], '/console/signin?m=ended');
    const templates = await api('GET', '/v1/admin/templates');
    assert.ok(!templates.body.templates.some((t) => t.name === 'after-signout'), 'the signed-out session created nothing');
  });

  assert.deepEqual(errors, [], 'no script errors or CSP violations in the pages');
  console.log(`PASS ${steps.length} steps`);
} finally {
  await browser.close();
}
