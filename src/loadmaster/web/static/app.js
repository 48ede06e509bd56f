// loadmaster dashboard. Plain JS, no build step, no third-party code: it talks only to the API that served it.
// Everything the API returns is put into the page as text (textContent), never parsed as HTML.
"use strict";

(() => {
  const TOKEN_KEY = "loadmaster.token";
  const LOG_LINES_KEPT = 2000;
  const USAGE_REFRESH_MS = 30000;
  const ACTIVE = new Set(["QUEUED", "DOWNLOADING", "PROCESSING", "STORING", "HALTED"]);
  const TERMINAL = new Set(["COMPLETED", "FAILED", "CANCELLED"]);

  // ---- the API ---------------------------------------------------------------------------------------------
  // The one place that knows the server's routes.
  const API = "/api/v1";
  const ROUTES = {
    me: () => `${API}/whoami`,
    jobs: (query) => `${API}/jobs?${new URLSearchParams(query)}`,
    submit: (tenant) => `${API}/jobs${tenant ? `?${new URLSearchParams({ tenant })}` : ""}`,
    job: (id) => `${API}/jobs/${encodeURIComponent(id)}`,
    reports: (id, q) => `${API}/jobs/${encodeURIComponent(id)}/reports?${new URLSearchParams(q)}`,
    results: (id) => `${API}/jobs/${encodeURIComponent(id)}/results`,
    resultFile: (id, path) => `${API}/jobs/${encodeURIComponent(id)}/results/${path.split("/").map(encodeURIComponent).join("/")}`,
    action: (id, verb) => `${API}/jobs/${encodeURIComponent(id)}/${verb}`,
    logStream: (id, q) => `${API}/jobs/${encodeURIComponent(id)}/logs/stream?${new URLSearchParams(q)}`,
    queue: () => `${API}/queue`,
    cluster: () => `${API}/cluster`,
    tenants: () => `${API}/tenants`,
    tenant: (name) => `${API}/tenants/${encodeURIComponent(name)}`,
    tokens: (name) => `${API}/tenants/${encodeURIComponent(name)}/tokens`,
    userTokens: (name, user) => `${API}/tenants/${encodeURIComponent(name)}/tokens/${encodeURIComponent(user)}`,
    rotate: (name, user) => `${API}/tenants/${encodeURIComponent(name)}/tokens/${encodeURIComponent(user)}/rotate`,
    usage: (q) => `${API}/usage?${new URLSearchParams(q)}`,
    timeline: (q) => `${API}/usage/timeline?${new URLSearchParams(q)}`,
  };

  class ApiError extends Error {
    constructor(status, message, problems) {
      super(message);
      this.status = status;
      this.problems = problems || []; // [{field, message}] from the API's error body
    }
  }

  // The API's errors are {"error": "one line", "problems": [{"field", "message"}]}; a proxy in between may
  // answer with anything else, which is shown as it came (cut short).
  function describeError(status, body) {
    let text = "";
    if (body && typeof body === "object" && typeof body.error === "string") {
      text = body.error;
      const more = (body.problems || []).slice(1).map((p) => (p.field ? `${p.field}: ${p.message}` : p.message));
      if (more.length) text += ` — ${more.join("; ")}`;
    } else if (typeof body === "string") {
      text = body.trim().slice(0, 300);
    }
    if (status === 401) return `That token was not accepted (401)${text ? ": " + text : ""}.`;
    if (status === 403) return `Not allowed with this token (403)${text ? ": " + text : ""}.`;
    if (status === 404) return `Not found (404)${text ? ": " + text : ""}.`;
    if (status >= 500) return `The server failed (${status})${text ? ": " + text : ""}. See the server log.`;
    return `${text || "Request failed"} (${status}).`;
  }

  // body: an object (sent as JSON), or text with its contentType (a manifest as YAML).
  async function api(method, path, body, signal, contentType) {
    const headers = { Authorization: `Bearer ${state.token}`, Accept: "application/json" };
    const init = { method, headers, signal, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = contentType || "application/json";
      init.body = contentType ? body : JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (err) {
      if (err.name === "AbortError") throw err;
      throw new ApiError(0, `Cannot reach the server (${err.message}). Is it still running?`);
    }
    const type = response.headers.get("Content-Type") || "";
    const payload = type.includes("json") ? await response.json().catch(() => null) : await response.text();
    if (!response.ok) {
      const problems = payload && typeof payload === "object" && Array.isArray(payload.problems) ? payload.problems : [];
      throw new ApiError(response.status, describeError(response.status, payload), problems);
    }
    return payload;
  }

  // ---- small helpers ---------------------------------------------------------------------------------------
  const $ = (id) => document.getElementById(id);

  // el("td", {class: "x"}, "text", childNode, ...): text children become text nodes, never HTML.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key === "class") node.className = value;
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function fillTable(table, rows, emptyText, columns) {
    const body = table.tBodies[0];
    if (!rows.length) {
      body.replaceChildren(el("tr", { class: "empty" }, el("td", { colspan: columns }, emptyText)));
    } else {
      body.replaceChildren(...rows);
    }
  }

  const pad = (n) => String(n).padStart(2, "0");

  // UNIX seconds -> local time; the date only when it is not today.
  function fmtTime(t) {
    if (t === null || t === undefined) return "—";
    const d = new Date(t * 1000);
    const now = new Date();
    const hms = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
    return d.toDateString() === now.toDateString() ? hms : `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${hms}`;
  }

  function fmtSpan(seconds) {
    const s = Math.max(0, Math.round(seconds));
    if (s < 60) return `${s}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
    if (s < 86400) return `${Math.floor(s / 3600)}h ${pad(Math.floor((s % 3600) / 60))}m`;
    return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
  }

  function fmtEstimate(t, waitReason) {
    if (t === null || t === undefined) {
      return HELD[waitReason] || (waitReason === "not_yet_considered" ? "not estimated yet" : "beyond the estimate horizon");
    }
    const delta = t - Date.now() / 1000;
    return delta <= 1 ? `now (${fmtTime(t)})` : `in ${fmtSpan(delta)} (${fmtTime(t)})`;
  }

  // Jobs the scheduler does not see yet (control/gates.py): no estimate, but a reason.
  const HELD = { dependency: "once its dependencies allow", array_limit: "when a task of its array ends" };

  const humanise = (reason) => (reason ? String(reason).replaceAll("_", " ") : "—");
  const statusBadge = (status) => el("span", { class: `status ${status}` }, status);

  // ---- state -----------------------------------------------------------------------------------------------
  const params = new URLSearchParams(location.search);
  const state = {
    token: sessionStorage.getItem(TOKEN_KEY),
    me: null, // WhoAmI: {admin, tenant, gpu_quota, borrow_limit}
    refreshMs: Math.min(60000, Math.max(500, Number(params.get("refresh")) || 3000)),
    timer: null,
    refreshing: false,
    usageAt: 0, // when the usage panel was last read (ms)
    usageDirty: true, // its window or grouping changed since
    selected: null, // job id in the detail view
    log: null, // the log stream followed: {abort: AbortController, key: "job/attempt/rank", allRanks, ended}
    rendered: {}, // part -> the JSON it was last rendered from
    // The jobs table: filters, and keyset pages (`before` of the page shown, those of the newer pages before it).
    filters: { status: "", name: "", tenant: "" },
    page: { before: null, newer: [], next: null },
    pageSize: Math.min(500, Math.max(5, Number(params.get("pageSize")) || 50)),
    metrics: null, // the detail's charts: {job, attempts: {n: {offset, size, done}}, records: [...], drawn}
    tenants: [], // the admin's last tenant list (TenantOut), to fill the edit form from
    managed: null, // {name, roots: the roots text the edit form was filled with} of the tenant being managed
  };

  // ---- login -----------------------------------------------------------------------------------------------
  function showLogin(message) {
    stopRefresh();
    closeDetail();
    $("dashboard").hidden = true;
    $("whoami").hidden = $("logout").hidden = $("refresh").hidden = true;
    $("updated").textContent = "";
    $("login").hidden = false;
    $("login-error").hidden = !message;
    $("login-error").textContent = message || "";
    $("token").focus();
  }

  async function signIn(token) {
    state.token = token;
    try {
      state.me = await api("GET", ROUTES.me());
    } catch (err) {
      state.token = null;
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin(err.message);
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, token);
    $("login").hidden = true;
    $("dashboard").hidden = false;
    $("logout").hidden = $("refresh").hidden = false;
    $("whoami").hidden = false;
    $("whoami").textContent = state.me.admin ? "admin" : `tenant ${state.me.tenant}`;
    $("tenants-panel").hidden = !state.me.admin;
    $("filter-tenant-label").hidden = $("submit-tenant-label").hidden = !state.me.admin;
    state.rendered = {};
    hideToken();
    closeManage();
    showTenantsMessage("", "");
    state.filters = { status: "", name: "", tenant: "" };
    state.page = { before: null, newer: [], next: null };
    for (const id of ["filter-status", "filter-name", "filter-tenant"]) $(id).value = "";
    await refresh();
    startRefresh();
    openFromHash();
  }

  function signOut() {
    sessionStorage.removeItem(TOKEN_KEY);
    state.token = null;
    state.me = null;
    state.usageDirty = true; // the next token's usage is read at once
    hideToken(); // a new tenant's token never outlives the admin's session on the page
    closeManage();
    history.replaceState(null, "", location.pathname + location.search);
    showLogin("");
  }

  // ---- refresh loop ----------------------------------------------------------------------------------------
  function startRefresh() {
    stopRefresh();
    state.timer = setInterval(refresh, state.refreshMs);
  }

  function stopRefresh() {
    if (state.timer) clearInterval(state.timer);
    state.timer = null;
  }

  function showError(message) {
    $("error").hidden = !message;
    $("error").textContent = message || "";
  }

  async function refresh() {
    if (state.refreshing || !state.token) return;
    state.refreshing = true;
    try {
      const wanted = [api("GET", ROUTES.cluster()), api("GET", ROUTES.queue()), api("GET", ROUTES.jobs(jobsQuery()))];
      // Usage reads every attempt of the window from the store: asked every 30 s, or at once when its
      // window or grouping changes, not at every refresh.
      const usageDue = state.usageDirty || Date.now() - state.usageAt >= USAGE_REFRESH_MS;
      const since = Date.now() / 1000 - Number($("usage-window").value);
      wanted.push(usageDue ? api("GET", ROUTES.usage({ since, by: $("usage-by").value })) : Promise.resolve(null));
      wanted.push(usageDue ? api("GET", ROUTES.timeline({ since })) : Promise.resolve(null));
      if (state.me && state.me.admin) wanted.push(api("GET", ROUTES.tenants()));
      const results = await Promise.allSettled(wanted);
      const failure = results.find((r) => r.status === "rejected");
      if (failure && failure.reason.status === 401) {
        signOut();
        showLogin("The server no longer accepts this token (401). Sign in again.");
        return;
      }
      const [cluster, queue, jobs, usage, timeline, tenants] =
        results.map((r) => (r.status === "fulfilled" ? r.value : null));
      if (usage && timeline) {
        state.usageAt = Date.now();
        state.usageDirty = false;
      }
      renderChanged("usage", usage, renderUsage);
      renderChanged("timeline", timeline, renderTimeline);
      renderChanged("cluster", cluster, renderCluster);
      renderChanged("queue", queue, renderQueue, true);
      renderChanged("jobs", jobs, renderJobs);
      renderChanged("tenants", tenants, renderTenants);
      showError(failure ? failure.reason.message : "");
      if (state.selected) await loadDetail(state.selected);
      if (!failure) $("updated").textContent = `updated ${fmtTime(Date.now() / 1000)}`;
    } finally {
      state.refreshing = false;
    }
  }

  // A table is rebuilt only when its data changed: the rows under the user's pointer stay put between refreshes.
  // Parts that show relative times ("in 5m") are redrawn every 10 s even when unchanged, so that they stay true.
  function renderChanged(part, payload, render, relative = false) {
    if (!payload) return;
    const text = JSON.stringify(payload) + (relative ? Math.floor(Date.now() / 10000) : "");
    if (state.rendered[part] === text) return;
    state.rendered[part] = text;
    render(payload);
  }

  // ---- cluster ---------------------------------------------------------------------------------------------
  function renderCluster(cluster) {
    const nodes = cluster.nodes || [];
    const cards = nodes.map((n) => {
      const cells = [];
      for (let i = 0; i < n.gpus; i++) {
        const used = i < n.gpus_used;
        cells.push(el("span", { class: `gpu${used ? " used" : ""}`, title: `${n.name} GPU ${i}: ${used ? "in use" : "free"}` }));
      }
      const down = n.state && n.state !== "alive";  // dead (left the cluster) or draining: nothing lands there
      return el("div", { class: `node${down ? " down" : ""}`, "data-node": n.name, "data-state": n.state || "alive" },
        el("div", { class: "name" }, down ? `${n.name} (${n.state})` : n.name),
        el("div", { class: "count" }, `${n.gpus_used}/${n.gpus} GPUs used · ${n.gpus_free} free`),
        el("div", { class: "gpus" }, cells),
        el("div", { class: "res" }, `${fmtNum(n.cpus_used)}/${fmtNum(n.cpus)} CPUs · ${fmtNum(n.mem_used_gb)}/${fmtNum(n.mem_gb)} GB`),
        n.jobs.length ? el("div", { class: "res mono" }, n.jobs.join(" ")) : null);
    });
    $("cluster").replaceChildren(...(cards.length ? cards : [el("p", { class: "muted" }, "No nodes.")]));
    const others = cluster.other_running ? ` · ${cluster.other_running} running job(s) of other tenants` : "";
    $("cluster-summary").textContent =
      `${cluster.gpus_used}/${cluster.total_gpus} GPUs in use on ${nodes.length} node${nodes.length === 1 ? "" : "s"}${others}`;
  }

  const fmtNum = (x) => String(Math.round(x * 100) / 100);

  // ---- queue -----------------------------------------------------------------------------------------------
  function renderQueue(queue) {
    const entries = queue.entries || [];
    const rows = entries.map((q) => el("tr", { "data-job": q.job_id },
      el("td", {}, q.position),
      el("td", {}, el("a", { href: `#job=${q.job_id}`, class: "job-link mono" }, q.job_id), " ", q.name),
      el("td", {}, q.tenant),
      el("td", {}, humanise(q.wait_reason)),
      el("td", {}, fmtEstimate(q.estimated_start_at, q.wait_reason))));
    fillTable($("queue"), rows, "Nothing is waiting.", 5);
    $("queue-summary").textContent = entries.length ? `${entries.length} waiting` : "";
  }

  // ---- jobs ------------------------------------------------------------------------------------------------
  function renderJobs(payload) {
    const jobs = payload.jobs || [];
    const rows = jobs.map((j) => el("tr", {
      "data-job": j.id, "data-status": j.status, class: j.id === state.selected ? "selected" : null,
      onclick: () => openDetail(j.id),
    },
    el("td", { class: "mono" }, j.id),
    el("td", {}, j.name),
    el("td", {}, statusBadge(j.status)),
    el("td", {}, j.tenant),
    el("td", {}, `${j.learners} × ${j.gpus_per_learner}`),
    el("td", {}, fmtTime(j.submitted_at)),
    el("td", {}, fmtTime(j.first_started_at)),
    el("td", {}, j.attempts),
    el("td", {}, el("span", { class: "row-actions" }, actionButtons(j, true)))));
    const filtered = state.filters.status || state.filters.name || state.filters.tenant;
    fillTable($("jobs"), rows, filtered ? "No job matches these filters." : "No jobs yet.", 9);
    const active = jobs.filter((j) => ACTIVE.has(j.status)).length;
    $("jobs-summary").textContent = jobs.length ? `${jobs.length} shown · ${active} active` : "";
    state.page.next = payload.next_cursor || null;
    $("page-older").disabled = !state.page.next;
    $("page-newer").disabled = state.page.newer.length === 0;
    $("page-info").textContent = `page ${state.page.newer.length + 1}`;
  }

  // ---- filters and pages -----------------------------------------------------------------------------------
  function jobsQuery() {
    const query = { limit: String(state.pageSize) };
    if (state.filters.status) query.status = state.filters.status;
    if (state.filters.name) query.name_contains = state.filters.name;
    if (state.filters.tenant && state.me && state.me.admin) query.tenant = state.filters.tenant;
    if (state.page.before) query.before = state.page.before;
    return query;
  }

  async function showJobsPage() {
    try {
      const payload = await api("GET", ROUTES.jobs(jobsQuery()));
      renderChanged("jobs", payload, renderJobs);
      showError("");
    } catch (err) {
      showError(err.message);
    }
  }

  function setFilters() {
    const next = { status: $("filter-status").value, name: $("filter-name").value.trim(),
      tenant: $("filter-tenant").value.trim() };
    if (JSON.stringify(next) === JSON.stringify(state.filters)) return;
    state.filters = next;
    state.page = { before: null, newer: [], next: null }; // new filters start at the newest page
    showJobsPage();
  }

  function olderPage() {
    if (!state.page.next) return;
    state.page.newer.push(state.page.before);
    state.page.before = state.page.next;
    showJobsPage();
  }

  function newerPage() {
    if (!state.page.newer.length) return;
    state.page.before = state.page.newer.pop();
    showJobsPage();
  }

  // ---- submit ----------------------------------------------------------------------------------------------
  // The manifest goes to the API as it was typed (YAML, of which JSON is a part); the API validates it and its
  // 4xx answer lists each field it refused with the fix, shown one per line.
  async function submitManifest(event) {
    event.preventDefault();
    const text = $("manifest").value;
    const tenant = state.me && state.me.admin ? $("submit-tenant").value.trim() : "";
    $("submit-button").disabled = true;
    $("submit-result").textContent = "submitting…";
    showSubmitProblems(null);
    try {
      const job = await api("POST", ROUTES.submit(tenant), text, undefined, "application/yaml");
      $("submit-result").replaceChildren("submitted ",
        el("a", { href: `#job=${job.id}`, class: "job-link mono", "data-job": job.id }, job.id), ` (${job.status})`);
      await refresh();
    } catch (err) {
      $("submit-result").textContent = "";
      showSubmitProblems(err);
    } finally {
      $("submit-button").disabled = false;
    }
  }

  function showSubmitProblems(err) {
    const problems = err ? err.problems.filter((p) => p.field) : [];
    $("submit-error").hidden = !err;
    $("submit-error").textContent = err ? err.message : "";
    $("submit-problems").hidden = problems.length === 0;
    $("submit-problems").replaceChildren(...problems.map((p) =>
      el("li", { "data-field": p.field }, el("code", {}, p.field), `: ${p.message}`)));
  }

  // ---- actions ---------------------------------------------------------------------------------------------
  // Which requests make sense in which status; the server has the last word (its refusal is shown).
  function allowedActions(status) {
    const out = [];
    if (["QUEUED", "DOWNLOADING", "PROCESSING", "STORING"].includes(status)) out.push("halt");
    if (status === "HALTED") out.push("resume");
    if (ACTIVE.has(status)) out.push("cancel");
    return out;
  }

  function actionButtons(job, compact) {
    const pending = job.cancel_requested ? "cancel requested" : job.halt_requested ? "halt requested" : null;
    if (pending && !TERMINAL.has(job.status)) return el("span", { class: "muted" }, pending);
    return allowedActions(job.status).map((verb) => el("button", {
      type: "button",
      class: verb === "cancel" ? "danger" : null,
      "data-action": verb,
      title: `${verb} job ${job.id}`,
      onclick: (event) => {
        event.stopPropagation();
        act(job.id, verb, event.currentTarget);
      },
    }, compact ? verb : verb[0].toUpperCase() + verb.slice(1)));
  }

  async function act(id, verb, button) {
    if (verb === "cancel" && !window.confirm(`Cancel job ${id}? Its learners are stopped; this cannot be undone.`)) return;
    if (button) button.disabled = true;
    try {
      await api("POST", ROUTES.action(id, verb));
      showError("");
      if (state.selected === id) showDetailError("");
    } catch (err) {
      if (state.selected === id) showDetailError(`${verb} failed: ${err.message}`);
      else showError(`${verb} ${id} failed: ${err.message}`);
    }
    await refresh();
  }

  // ---- usage (GET /usage: GPU-hours from the store; /usage/timeline: busy GPUs over time) --------------------
  const fmtHours = (h) => h.toFixed(2);

  function renderUsage(payload) {
    const by = payload.by;
    $("usage-key").textContent = { day: "Day (UTC)", tenant: "Tenant", user: "Tenant/user", job: "Job" }[by] || by;
    const row = (r, total) => el("tr", { "data-key": r.key, class: total ? "total" : null },
      el("td", { class: by === "job" && !total ? "mono" : null }, by === "job" && !total ?
        el("a", { href: `#job=${r.key}`, class: "job-link" }, r.key) : r.key, r.name ? ` ${r.name}` : ""),
      el("td", {}, fmtHours(r.gpu_hours)),
      el("td", {}, fmtHours(r.failed_gpu_hours)),
      el("td", {}, fmtHours(r.preempted_gpu_hours)),
      el("td", {}, fmtHours(r.lost_gpu_hours)),
      el("td", {}, r.attempts),
      el("td", {}, r.jobs));
    const rows = payload.rows.map((r) => row(r, false));
    if (rows.length) rows.push(row(payload.total, true));
    fillTable($("usage"), rows, "No GPU was used in this window.", 7);
    $("usage-summary").textContent = `${fmtHours(payload.total.gpu_hours)} GPU-hours` +
      (payload.tenant ? ` · tenant ${payload.tenant}` : "");
  }

  // Busy GPUs as a share of the cluster's, one point per step of the window.
  function renderTimeline(payload) {
    const total = Math.max(1, payload.total_gpus);
    const points = payload.busy_gpus.map((busy, i) => ({ x: payload.since + (i + 0.5) * payload.step_s, y: 100 * busy / total, attempt: 0 }));
    const canvas = $("utilisation");
    canvas.dataset.points = String(points.length);
    canvas.dataset.peak = String(points.reduce((m, p) => Math.max(m, p.y), 0));
    plot(canvas, points, { x: fmtTime, y: (y) => `${fmtNum(y)}%`, range: [0, 100] });
    const mean = points.length ? points.reduce((a, p) => a + p.y, 0) / points.length : 0;
    $("utilisation-title").textContent = `GPU utilisation · mean ${fmtNum(mean)}% of ${payload.total_gpus} GPUs`;
  }

  // ---- tenants (admin) -------------------------------------------------------------------------------------
  // Create, edit (quota, borrowing, roots), delete, and each user's tokens: issue, rotate, revoke. The server
  // checks everything; its refusal (a 409 for a tenant with unfinished jobs, a 422 naming the field) is shown
  // as it answered. A new token is shown once, in a box of its own, until the admin hides it.
  const fmtRoots = (roots) => (roots || []).map((r) => `${r.path}:${r.writable ? "rw" : "ro"}`).join("\n");

  function renderTenants(payload) {
    state.tenants = payload.tenants || [];
    const managed = state.managed && state.managed.name;
    const rows = state.tenants.map((t) => el("tr", { "data-tenant": t.name, class: t.name === managed ? "selected" : null },
      el("td", {}, t.name),
      el("td", {}, t.gpu_quota),
      el("td", {}, t.borrow_limit ?? "any idle GPU"),
      el("td", {}, t.gpus_in_use),
      el("td", {}, t.jobs_running),
      el("td", {}, t.jobs_queued),
      el("td", { class: "mono" }, fmtRoots(t.roots).replaceAll("\n", ", ") || "—"),
      el("td", {}, el("span", { class: "row-actions" }, el("button", {
        type: "button", "data-action": "manage", title: `edit tenant ${t.name}, its users and tokens`,
        onclick: () => openManage(t.name),
      }, "manage")))));
    fillTable($("tenants"), rows, "No tenants yet: create one below (or with `loadmaster tenant create`).", 8);
  }

  function showTenantsMessage(error, result) {
    $("tenants-error").hidden = !error;
    $("tenants-error").textContent = error || "";
    $("tenants-result").textContent = result || "";
    if (error) $("tenants-error").scrollIntoView({ block: "nearest" });
  }

  function showToken(title, token) {
    $("new-token-title").textContent = title;
    $("new-token-copy").textContent = "Copy";
    $("new-token-value").value = token;
    $("new-token").hidden = false;
    $("new-token").scrollIntoView({ block: "nearest" });
    $("new-token-value").select();
  }

  function hideToken() {
    $("new-token").hidden = true;
    $("new-token-value").value = "";
    $("new-token-title").textContent = "";
  }

  async function copyToken() {
    const input = $("new-token-value");
    input.select();
    try {
      await navigator.clipboard.writeText(input.value);
      $("new-token-copy").textContent = "Copied";
    } catch {
      // No clipboard access (an insecure origin, a denied permission): the text is selected for Ctrl+C.
      $("new-token-copy").textContent = "Selected: press Ctrl+C";
    }
  }

  // One admin action: its button held down meanwhile, its outcome or the server's refusal shown, then the
  // lists read again (the tenants table at once; the users table when it is open).
  async function tenantAction(button, what, call) {
    if (button) button.disabled = true;
    showTenantsMessage("", "");
    try {
      const result = await call();
      if (result) showTenantsMessage("", result);
    } catch (err) {
      showTenantsMessage(`${what} failed: ${err.message}`, "");
    } finally {
      if (button) button.disabled = false;
    }
    if (state.managed) await loadUsers(state.managed.name);
    delete state.rendered.tenants;
    await refresh();
  }

  // A number field as typed: blank is `blank`, digits a number, anything else goes as text, so that the
  // server's refusal names the field.
  function numberField(id, blank) {
    const text = $(id).value.trim();
    if (text === "") return blank;
    return /^\d+$/.test(text) ? Number(text) : text;
  }

  // Roots as `tenant set-roots --root` takes them: PATH:ro or PATH:rw, one a line.
  function parseRoots(text) {
    const roots = [];
    text.split("\n").map((l) => l.trim()).forEach((line, i) => {
      if (!line) return;
      const cut = line.lastIndexOf(":");
      const [path, mode] = [line.slice(0, cut), line.slice(cut + 1)];
      if (cut <= 0 || !["ro", "rw"].includes(mode)) {
        throw new ApiError(0, `roots, line ${i + 1} (${line}): write PATH:ro or PATH:rw`);
      }
      roots.push({ path, writable: mode === "rw" });
    });
    return roots;
  }

  function createTenant(event) {
    event.preventDefault();
    const name = $("create-name").value.trim();
    const body = { name, gpus: numberField("create-gpus", undefined), borrow: numberField("create-borrow", null),
      user: $("create-user").value.trim() || "default" };
    tenantAction($("create-button"), `creating tenant ${name || "(no name)"}`, async () => {
      const out = await api("POST", ROUTES.tenants(), body);
      showToken(`Tenant ${out.tenant.name} created. API token of its user ${body.user}:`, out.token);
      for (const id of ["create-name", "create-gpus", "create-borrow"]) $(id).value = "";
      $("create-user").value = "default";
      return `tenant ${out.tenant.name} created with a quota of ${out.tenant.gpu_quota} GPUs`;
    });
  }

  function openManage(name) {
    const tenant = state.tenants.find((t) => t.name === name);
    if (!tenant) return;
    state.managed = { name, roots: fmtRoots(tenant.roots) };
    $("manage-name").textContent = name;
    $("edit-gpus").value = String(tenant.gpu_quota);
    $("edit-borrow").value = tenant.borrow_limit === null ? "" : String(tenant.borrow_limit);
    $("edit-roots").value = state.managed.roots;
    $("issue-user").value = "default";
    $("issue-days").value = "";
    fillTable($("tenant-users"), [], "…", 5);
    $("tenant-manage").hidden = false;
    for (const row of document.querySelectorAll("#tenants tbody tr")) row.classList.toggle("selected", row.dataset.tenant === name);
    showTenantsMessage("", "");
    loadUsers(name);
  }

  function closeManage() {
    state.managed = null;
    $("tenant-manage").hidden = true;
    for (const row of document.querySelectorAll("#tenants tbody tr.selected")) row.classList.remove("selected");
  }

  async function loadUsers(name) {
    let out;
    try {
      out = await api("GET", ROUTES.tokens(name));
    } catch (err) {
      if (state.managed && state.managed.name === name) {
        fillTable($("tenant-users"), [], `Cannot list the users: ${err.message}`, 5);
      }
      return;
    }
    if (!state.managed || state.managed.name !== name) return; // another tenant was opened meanwhile
    const rows = out.users.map((u) => el("tr", { "data-user": u.user },
      el("td", { class: "mono" }, u.user),
      el("td", {}, u.tokens),
      el("td", {}, fmtTime(u.created_at)),
      el("td", {}, u.expires_at === null ? "never (until revoked)" :
        `${fmtTime(u.expires_at)}${u.expires_at <= Date.now() / 1000 ? " (expired)" : ""}`),
      el("td", {}, el("span", { class: "row-actions" },
        el("button", { type: "button", "data-action": "rotate", title: `replace ${u.user}'s tokens by a new one`,
          onclick: (event) => rotateToken(name, u.user, event.currentTarget) }, "rotate"),
        el("button", { type: "button", class: "danger", "data-action": "revoke", title: `revoke ${u.user}'s tokens`,
          onclick: (event) => revokeTokens(name, u.user, event.currentTarget) }, "revoke")))));
    fillTable($("tenant-users"), rows, "No user has a token: issue one below.", 5);
  }

  function saveTenant(event) {
    event.preventDefault();
    const { name, roots } = state.managed;
    const body = { borrow: numberField("edit-borrow", null) };
    const gpus = numberField("edit-gpus", undefined);
    if (gpus !== undefined) body.gpus = gpus;
    tenantAction($("edit-save"), `saving tenant ${name}`, async () => {
      // Roots are sent only when edited, so a quota change does not rewrite them (nor log them in the audit).
      if ($("edit-roots").value.trim() !== roots.trim()) body.roots = parseRoots($("edit-roots").value);
      const out = await api("PATCH", ROUTES.tenant(name), body);
      if (state.managed && state.managed.name === name) state.managed.roots = fmtRoots(out.roots);
      return `tenant ${name}: quota ${out.gpu_quota} GPUs, borrow limit ` +
        `${out.borrow_limit ?? "none"}, roots ${fmtRoots(out.roots).replaceAll("\n", ", ") || "none"}`;
    });
  }

  function issueToken(event) {
    event.preventDefault();
    const { name } = state.managed;
    const user = $("issue-user").value.trim() || "default";
    tenantAction($("issue-button"), `issuing a token for ${name}/${user}`, async () => {
      const days = $("issue-days").value.trim();
      const body = { user };
      if (days) {
        if (!/^\d+(\.\d+)?$/.test(days) || Number(days) <= 0) {
          throw new ApiError(0, `expires in ${days} days: give a number of days above 0, or nothing for a token ` +
            "that lives until revoked");
        }
        body.expires_in_s = Number(days) * 86400;
      }
      const out = await api("POST", ROUTES.tokens(name), body);
      showToken(`New API token of ${out.tenant}/${out.user}` +
        (out.expires_at ? ` (expires ${fmtTime(out.expires_at)}):` : ":"), out.token);
      return `token issued for ${out.tenant}/${out.user}`;
    });
  }

  function rotateToken(name, user, button) {
    if (!window.confirm(`Rotate ${name}/${user}'s token? Its old tokens stop working at once.`)) return;
    tenantAction(button, `rotating ${name}/${user}'s token`, async () => {
      const out = await api("POST", ROUTES.rotate(name, user));
      showToken(`New API token of ${out.tenant}/${out.user} (the old ones no longer work):`, out.token);
      return `${out.tenant}/${out.user}'s token rotated`;
    });
  }

  function revokeTokens(name, user, button) {
    if (!window.confirm(`Revoke every token of ${name}/${user}? They stop working at once.`)) return;
    tenantAction(button, `revoking ${name}/${user}'s tokens`, async () => {
      const out = await api("DELETE", ROUTES.userTokens(name, user));
      return `${out.revoked} token(s) of ${out.tenant}/${out.user} revoked`;
    });
  }

  function deleteTenant() {
    const { name } = state.managed;
    if (!window.confirm(`Delete tenant ${name}, its tokens and its finished jobs' records? This cannot be undone.`)) return;
    tenantAction($("tenant-delete"), `deleting tenant ${name}`, async () => {
      const out = await api("DELETE", ROUTES.tenant(name));
      closeManage();
      return `tenant ${out.tenant} deleted (${out.jobs_deleted} finished jobs' records with it)`;
    });
  }

  // ---- job detail ------------------------------------------------------------------------------------------
  function openFromHash() {
    const match = /^#job=([\w.-]+)$/.exec(location.hash);
    if (match) openDetail(match[1]);
    else closeDetail();
  }

  async function openDetail(id) {
    if (location.hash !== `#job=${id}`) history.replaceState(null, "", `#job=${id}`);
    if (state.selected !== id) {
      stopLog();
      state.selected = id;
      delete state.rendered.detail;
      showDetailError("");
      $("detail-title").textContent = id;
      $("detail-facts").replaceChildren();
      $("detail-actions").replaceChildren();
      $("log").replaceChildren();
      $("log-attempt").replaceChildren();
      $("log-rank").replaceChildren(el("option", { value: "" }, "all"));
      $("log-state").textContent = "";
      fillTable($("detail-history"), [], "…", 4);
      fillTable($("detail-attempts"), [], "…", 7);
      state.metrics = { job: id, attempts: {}, records: [], drawn: -1 };
      delete state.rendered.results;
      delete state.rendered.resultsFor;
      $("metrics").replaceChildren();
      $("metrics-state").textContent = "";
      $("results").replaceChildren();
      $("results-state").textContent = "";
    }
    $("detail").hidden = false;
    for (const row of document.querySelectorAll("#jobs tbody tr")) row.classList.toggle("selected", row.dataset.job === id);
    await loadDetail(id);
  }

  function closeDetail() {
    stopLog();
    state.selected = null;
    state.metrics = null;
    $("detail").hidden = true;
    if (location.hash.startsWith("#job=")) history.replaceState(null, "", location.pathname + location.search);
    for (const row of document.querySelectorAll("#jobs tbody tr.selected")) row.classList.remove("selected");
  }

  function showDetailError(message) {
    $("detail-error").hidden = !message;
    $("detail-error").textContent = message || "";
  }

  async function loadDetail(id) {
    let job;
    try {
      job = await api("GET", ROUTES.job(id));
    } catch (err) {
      if (state.selected === id) showDetailError(err.message);
      return;
    }
    if (state.selected !== id) return; // the user moved on while we waited
    renderChanged("detail", job, renderDetail, true);
    syncLog(job);
    await loadMetrics(job);
    if (state.rendered.resultsFor !== state.rendered.detail) { // when the job changed, or every 10 s
      state.rendered.resultsFor = state.rendered.detail;
      await loadResults(job);
    }
  }

  // ---- metric charts ---------------------------------------------------------------------------------------
  // What rank 0 reported with runtime.report(), attempt after attempt, read incrementally: each refresh asks
  // only for the bytes reported since (the API answers with the offset to continue from).
  const NOT_METRICS = new Set(["time", "step", "total_steps", "progress", "rank", "attempt", "epoch"]);
  const MAX_CHARTS = 6;
  const MAX_PAGES_PER_REFRESH = 8;

  async function loadMetrics(job) {
    const m = state.metrics;
    if (!m || m.job !== job.id) return;
    for (const a of job.attempt_history || []) {
      const seen = (m.attempts[a.number] ||= { offset: 0, size: -1, done: false });
      for (let page = 0; !seen.done && page < MAX_PAGES_PER_REFRESH; page++) {
        let out;
        try {
          out = await api("GET", ROUTES.reports(job.id, { attempt: a.number, rank: 0, offset: seen.offset }));
        } catch (err) {
          $("metrics-state").textContent = `reports unavailable: ${err.message}`;
          return;
        }
        if (state.metrics !== m) return;
        for (const r of out.records) m.records.push({ ...r, attempt: a.number });
        const progressed = out.next_offset > seen.offset;
        seen.offset = out.next_offset;
        seen.done = a.ended_at !== null && seen.offset >= out.size; // an ended attempt reports no more
        if (!progressed || seen.offset >= out.size) break;
      }
    }
    if (m.drawn !== m.records.length) {
      m.drawn = m.records.length;
      drawCharts(m.records);
    }
  }

  function metricNames(records) {
    const names = new Set();
    for (const r of records) {
      for (const [k, v] of Object.entries(r)) if (!NOT_METRICS.has(k) && typeof v === "number" && isFinite(v)) names.add(k);
    }
    return [...names].sort((a, b) => (a === "loss" ? -1 : b === "loss" ? 1 : a.localeCompare(b))).slice(0, MAX_CHARTS);
  }

  function drawCharts(records) {
    const names = metricNames(records);
    $("metrics-state").textContent = records.length ? `${records.length} report(s) from rank 0` :
      "nothing reported yet (runtime.report(step=..., loss=...) draws charts here)";
    $("metrics").replaceChildren(...names.map((name) => {
      const points = records.filter((r) => typeof r[name] === "number" && isFinite(r[name]))
        .map((r, i) => ({ x: typeof r.step === "number" ? r.step : i, y: r[name], attempt: r.attempt }));
      const canvas = el("canvas", { width: 340, height: 150, "data-metric": name, "data-points": points.length });
      plot(canvas, points);
      const last = points.length ? points[points.length - 1].y : null;
      return el("div", { class: "chart" }, el("div", { class: "title" }, `${name}${last === null ? "" : ` · last ${fmtNum(last)}`}`), canvas);
    }));
  }

  // A line chart on a canvas: step on x, the metric on y; a dashed line where an attempt resumed. `axes` may
  // give the labels' formats (x, y) and a fixed y range.
  function plot(canvas, points, axes = {}) {
    const fx = axes.x || ((x) => `step ${fmtNum(x)}`), fy = axes.y || fmtNum;
    const ctx = canvas.getContext("2d");
    const w = canvas.width, h = canvas.height, left = 44, bottom = 18, top = 6, right = 8;
    ctx.clearRect(0, 0, w, h);
    if (!points.length) return;
    const step = Math.max(1, Math.floor(points.length / 1000)); // at most ~1000 segments drawn
    const shown = points.filter((_, i) => i % step === 0 || i === points.length - 1);
    const xs = shown.map((p) => p.x), ys = shown.map((p) => p.y);
    const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
    let [y0, y1] = axes.range || [Math.min(...ys), Math.max(...ys)];
    if (y0 === y1) { y0 -= 1; y1 += 1; }
    const px = (x) => left + (x1 === x0 ? 0.5 : (x - x0) / (x1 - x0)) * (w - left - right);
    const py = (y) => top + (1 - (y - y0) / (y1 - y0)) * (h - top - bottom);
    ctx.strokeStyle = "#e3e6eb";
    ctx.strokeRect(left, top, w - left - right, h - top - bottom);
    ctx.fillStyle = "#6b7280";
    ctx.font = "10px system-ui, sans-serif";
    ctx.fillText(fy(y1), 2, top + 8);
    ctx.fillText(fy(y0), 2, h - bottom);
    ctx.fillText(fx(x0), left, h - 4);
    const last = axes.x ? fx(x1) : fmtNum(x1);
    ctx.fillText(last, w - right - ctx.measureText(last).width, h - 4);
    ctx.setLineDash([3, 3]);
    for (let i = 1; i < shown.length; i++) {
      if (shown[i].attempt !== shown[i - 1].attempt) {
        ctx.beginPath();
        ctx.moveTo(px(shown[i].x), top);
        ctx.lineTo(px(shown[i].x), h - bottom);
        ctx.stroke();
      }
    }
    ctx.setLineDash([]);
    ctx.strokeStyle = "#3b6fd8";
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    shown.forEach((p, i) => (i ? ctx.lineTo(px(p.x), py(p.y)) : ctx.moveTo(px(p.x), py(p.y))));
    ctx.stroke();
  }

  // ---- results ---------------------------------------------------------------------------------------------
  async function loadResults(job) {
    let out;
    try {
      out = await api("GET", ROUTES.results(job.id));
    } catch (err) {
      $("results-state").textContent = `unavailable: ${err.message}`;
      return;
    }
    if (state.selected !== job.id) return;
    const text = JSON.stringify(out.files);
    if (state.rendered.results === text) return;
    state.rendered.results = text;
    $("results-state").textContent = out.files.length ?
      `${out.files.length} file(s), ${fmtBytes(out.total_bytes)}${out.truncated ? " (first 10,000 shown)" : ""}` :
      "none (what the learners write to runtime.results_dir() shows here)";
    $("results").replaceChildren(...out.files.map((f) => el("li", { "data-path": f.path },
      el("button", { type: "button", onclick: (event) => download(job.id, f.path, event.currentTarget) }, "Download"),
      el("span", { class: "mono" }, f.path), el("span", { class: "muted" }, fmtBytes(f.size)))));
  }

  // The token travels in a header, never in a URL: the file is fetched, then handed to the browser as a blob.
  async function download(jobId, path, button) {
    button.disabled = true;
    try {
      const response = await fetch(ROUTES.resultFile(jobId, path), {
        headers: { Authorization: `Bearer ${state.token}` }, cache: "no-store",
      });
      if (!response.ok) {
        const body = await response.json().catch(() => null);
        throw new ApiError(response.status, describeError(response.status, body));
      }
      const url = URL.createObjectURL(await response.blob());
      const link = el("a", { href: url, download: path.split("/").pop() });
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000);
      button.closest("li").dataset.downloaded = "true";
    } catch (err) {
      showDetailError(`download of ${path} failed: ${err.message}`);
    } finally {
      button.disabled = false;
    }
  }

  function fmtBytes(n) {
    if (n < 1024) return `${n} B`;
    if (n < 1 << 20) return `${fmtNum(n / 1024)} KB`;
    if (n < 1 << 30) return `${fmtNum(n / (1 << 20))} MB`;
    return `${fmtNum(n / (1 << 30))} GB`;
  }

  function renderDetail(job) {
    $("detail-title").replaceChildren(el("span", { class: "mono" }, job.id), " ", job.name, " ", statusBadge(job.status));
    const m = job.manifest || {};
    const res = m.resources || {};
    const p = job.progress || {};
    const facts = [
      ["Tenant", job.tenant],
      ["Status reason", job.status_reason || "—"],
      ["Learners", `${job.learners} × (${job.gpus_per_learner} GPU, ${res.cpus ?? "?"} CPU, ${res.memory_gb ?? "?"} GB)`],
      ["Command", Array.isArray(m.command) ? m.command.join(" ") : m.command],
      ["Priority", job.priority],
      ["Submitted", fmtTime(job.submitted_at)],
      ["First started", fmtTime(job.first_started_at)],
      ["Finished", fmtTime(job.finished_at)],
      ["Attempts", `${job.attempts} (${job.failures} failed, ${job.preemptions} preempted)`],
    ];
    if (job.queue) {
      facts.push(["Queue", `position ${job.queue.position}, ${humanise(job.queue.wait_reason)}, ` +
        `starts ${fmtEstimate(job.queue.estimated_start_at, job.queue.wait_reason)}`]);
    }
    if (job.allocation) {
      facts.push(["Placement", job.allocation.learners.map((l) =>
        `rank ${l.rank} → ${l.node}${l.gpu_ids.length ? ` [GPU ${l.gpu_ids.join(",")}]` : ""}`).join(" · ")]);
    }
    if (p.last_step !== null && p.last_step !== undefined) {
      facts.push(["Progress", `step ${p.last_step}${p.checkpoint_step !== null ? `, checkpoint at step ${p.checkpoint_step}` : ""}` +
        (p.last_report_at ? ` (reported ${fmtTime(p.last_report_at)})` : "")]);
    }
    $("detail-facts").replaceChildren(...facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v ?? "—")]));
    $("detail-actions").replaceChildren(...[actionButtons(job, false)].flat());

    fillTable($("detail-history"), (job.history || []).map((t) => el("tr", {},
      el("td", {}, fmtTime(t.at)),
      el("td", {}, t.from_status ? statusBadge(t.from_status) : "—"),
      el("td", {}, statusBadge(t.to_status)),
      el("td", {}, t.reason || ""))), "No history.", 4);

    fillTable($("detail-attempts"), (job.attempt_history || []).map((a) => el("tr", { "data-attempt": a.number },
      el("td", {}, a.number),
      el("td", {}, fmtTime(a.started_at)),
      el("td", {}, a.ended_at ? `${fmtTime(a.ended_at)} (${fmtSpan(a.ended_at - a.started_at)})` : "running"),
      el("td", {}, a.outcome),
      el("td", { class: "mono" }, a.exit_codes.map((e) => `rank ${e.rank}: ${e.exit_code}`).join(", ") || "—"),
      el("td", {}, humanise(a.failure_category)),
      el("td", {}, a.retry_decision || "—"))), "Not started yet.", 7);
  }

  // ---- live logs -------------------------------------------------------------------------------------------
  // The attempt list follows the job; the newest attempt is followed unless the user chose an older one.
  function syncLog(job) {
    const select = $("log-attempt");
    const numbers = (job.attempt_history || []).map((a) => String(a.number));
    const before = [...select.options].map((o) => o.value);
    if (numbers.join() !== before.join()) {
      const onNewest = !select.value || select.value === before[before.length - 1];
      const keep = select.value;
      select.replaceChildren(...numbers.map((n) => el("option", { value: n }, `${n} of ${numbers.length}`)));
      select.value = onNewest ? numbers[numbers.length - 1] || "" : keep;
    }
    if (!select.value) {
      $("log-state").textContent = "no logs until the job starts";
      return;
    }
    startLog(job.id, select.value, $("log-rank").value);
  }

  function stopLog() {
    if (state.log) state.log.abort.abort();
    state.log = null;
  }

  // EventSource cannot send an Authorization header, so the stream is read with fetch and parsed here
  // (the text/event-stream format: "field: value" lines, events separated by a blank line).
  function startLog(jobId, attempt, rank) {
    const key = `${jobId}/${attempt}/${rank}`;
    if (state.log && state.log.key === key) return;
    stopLog();
    const abort = new AbortController();
    const stream = { abort, key, allRanks: rank === "" };
    state.log = stream;
    $("log").replaceChildren();
    $("log-state").textContent = "connecting…";
    const query = { attempt, tail: String(LOG_LINES_KEPT) };
    if (rank !== "") query.rank = rank;
    followLog(ROUTES.logStream(jobId, query), stream).catch((err) => {
      if (err.name === "AbortError") return;
      if (state.log === stream) {
        $("log-state").textContent = `log stream failed: ${err.message}`;
        state.log = null; // tried again at the next refresh
      }
    });
  }

  async function followLog(url, stream) {
    const response = await fetch(url, {
      headers: { Authorization: `Bearer ${state.token}`, Accept: "text/event-stream" },
      signal: stream.abort.signal,
      cache: "no-store",
    });
    if (!response.ok) {
      const type = response.headers.get("Content-Type") || "";
      const body = type.includes("json") ? await response.json().catch(() => null) : await response.text();
      throw new ApiError(response.status, describeError(response.status, body));
    }
    $("log-state").textContent = "following";
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.search(/\r?\n\r?\n/)) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut).replace(/^\r?\n\r?\n/, "");
        if (state.log !== stream) return;
        handleEvent(parseEvent(block), stream);
      }
    }
    if (state.log === stream && !stream.ended) {
      // Closed without its `end` event (the server restarted, a proxy timed out): follow again next refresh.
      $("log-state").textContent = "stream closed; reconnecting";
      state.log = null;
    }
  }

  function parseEvent(block) {
    const event = { event: "message", data: [] };
    for (const line of block.split(/\r?\n/)) {
      if (!line || line.startsWith(":")) continue; // a comment: the server's keep-alive
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "data") event.data.push(value);
      else if (field === "event") event.event = value;
    }
    event.data = event.data.join("\n");
    return event;
  }

  // Events of the API's stream: attempt {attempt, ranks}, log {rank, lines}, end {attempt, outcome, job_status}.
  function handleEvent(event, stream) {
    let data;
    try {
      data = JSON.parse(event.data);
    } catch {
      return;
    }
    if (event.event === "attempt") {
      const select = $("log-rank");
      const wanted = ["", ...data.ranks.map(String)];
      if (stream.allRanks && wanted.join() !== [...select.options].map((o) => o.value).join()) {
        select.replaceChildren(...wanted.map((r) => el("option", { value: r }, r === "" ? "all" : r)));
        select.value = "";
      }
    } else if (event.event === "log") {
      appendLog(data.lines, stream.allRanks ? `[${data.rank}] ` : "");
    } else if (event.event === "end") {
      stream.ended = true;
      $("log-state").textContent = `attempt ${data.attempt} ended: ${data.outcome} (job ${data.job_status})`;
    }
  }

  function appendLog(lines, prefix) {
    const log = $("log");
    const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    log.append(...lines.map((line) => el("span", { class: "line" }, `${prefix}${line}\n`)));
    while (log.childNodes.length > LOG_LINES_KEPT) log.firstChild.remove();
    if (atBottom) log.scrollTop = log.scrollHeight;
  }

  // ---- wiring ----------------------------------------------------------------------------------------------
  document.addEventListener("DOMContentLoaded", () => {
    $("login-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const token = $("token").value.trim();
      $("token").value = "";
      if (!token) {
        showLogin("Enter a token.");
        return;
      }
      signIn(token);
    });
    $("logout").addEventListener("click", signOut);
    $("submit-form").addEventListener("submit", submitManifest);
    $("job-filters").addEventListener("submit", (event) => event.preventDefault());
    $("filter-status").addEventListener("change", setFilters);
    $("usage-filters").addEventListener("submit", (event) => event.preventDefault());
    for (const id of ["usage-window", "usage-by"]) {
      $(id).addEventListener("change", () => { state.usageDirty = true; refresh(); });
    }
    for (const id of ["filter-name", "filter-tenant"]) {
      let timer = null;
      $(id).addEventListener("input", () => { // typing settles before the listing is asked again
        clearTimeout(timer);
        timer = setTimeout(setFilters, 300);
      });
    }
    $("tenant-create").addEventListener("submit", createTenant);
    $("tenant-edit").addEventListener("submit", saveTenant);
    $("token-issue").addEventListener("submit", issueToken);
    $("tenant-delete").addEventListener("click", deleteTenant);
    $("manage-close").addEventListener("click", closeManage);
    $("new-token-copy").addEventListener("click", copyToken);
    $("new-token-dismiss").addEventListener("click", hideToken);
    $("page-older").addEventListener("click", olderPage);
    $("page-newer").addEventListener("click", newerPage);
    $("refresh").addEventListener("click", refresh);
    $("detail-close").addEventListener("click", closeDetail);
    $("log-attempt").addEventListener("change", () => state.selected && loadDetail(state.selected));
    $("log-rank").addEventListener("change", () => state.selected && loadDetail(state.selected));
    window.addEventListener("hashchange", () => state.me && openFromHash());
    document.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && state.selected) closeDetail();
    });
    if (state.token) signIn(state.token);
    else showLogin("");
  });
})();
