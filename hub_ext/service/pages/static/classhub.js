// classhub pages: every action calls the classhub REST API (the same handlers scripts use),
// with the XSRF token of the page; a refusal shows the API's sentence next to the field.
"use strict";

const classhub = (() => {
  // read when used: this script loads in <head>, before the page's meta tags and settings exist
  const meta = (name) => (document.querySelector(`meta[name="${name}"]`) || {}).content || "";
  const prefixOf = () => meta("classhub-prefix") || "/services/classhub/";

  /** Call `api/<path>`; resolves to the JSON answer (`binary`: the body's bytes, an
   *  ArrayBuffer, for text such as logs), rejects with the API's message. */
  async function api(method, path, body, {raw = false, contentType = null, binary = false} = {}) {
    const headers = {...(window.classhubHeaders || {})};
    let payload;
    if (body instanceof FormData || raw) {
      payload = body;
      if (contentType) headers["Content-Type"] = contentType;
    } else if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      payload = JSON.stringify(body);
    }
    const r = await fetch(prefixOf() + "api/" + path, {method, headers, body: payload,
                                                   credentials: "same-origin"});
    if (binary && r.ok) return await r.arrayBuffer();
    const text = await r.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = {message: text}; }
    if (!r.ok) {
      const err = new Error((data && data.message) || `classhub answered ${r.status}.`);
      err.status = r.status;
      throw err;
    }
    return data;
  }

  /** Show `message` in the status element `el` (role=status / alert). */
  function say(el, message, ok = false) {
    if (typeof el === "string") el = document.getElementById(el);
    if (!el) return;
    el.textContent = message;
    el.classList.remove("d-none", "text-danger", "text-success");
    el.classList.add(ok ? "text-success" : "text-danger");
  }

  /** Run `work` for a button: disabled while it runs, `statusEl` emptied first, errors shown
   *  in it. */
  async function busy(button, statusEl, work) {
    button.disabled = true;
    // a new action clears what the previous one said (a refusal never sits under an old "Saved.")
    const el = typeof statusEl === "string" ? document.getElementById(statusEl) : statusEl;
    if (el) el.textContent = "";
    try {
      return await work();
    } catch (e) {
      say(statusEl, e.message);
      return undefined;
    } finally {
      button.disabled = false;
    }
  }

  const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => "&#" + c.charCodeAt(0) + ";");
  const enc = encodeURIComponent;

  /**
   * A tree of the folders (and files) of my running server, read through api/files.
   * Folders open with their toggle; clicking a name picks it. `onPick(path, type)`.
   */
  function tree(container, {files = false, onPick}) {
    let picked = null;
    async function load(path, into) {
      into.innerHTML = '<li class="text-muted">loading…</li>';
      let listing;
      try {
        listing = await api("GET", "files?path=" + enc(path));
      } catch (e) {
        into.innerHTML = "";
        const li = document.createElement("li");
        li.className = "text-danger classhub-tree-error";
        li.textContent = e.message;
        into.appendChild(li);
        return;
      }
      into.innerHTML = "";
      const entries = listing.folders.map((n) => ({name: n, type: "directory"}))
        .concat(files ? listing.files : []);
      if (!entries.length) into.innerHTML = '<li class="text-muted">(empty)</li>';
      for (const entry of entries) {
        const full = path ? path + "/" + entry.name : entry.name;
        const li = document.createElement("li");
        const folder = entry.type === "directory";
        if (folder) {
          const toggle = document.createElement("button");
          toggle.type = "button";
          toggle.className = "btn btn-sm btn-link classhub-toggle p-0 me-1";
          toggle.textContent = "▸";
          toggle.setAttribute("aria-label", "open " + full);
          const sub = document.createElement("ul");
          sub.className = "classhub-tree d-none";
          toggle.onclick = () => {
            const closed = sub.classList.toggle("d-none");
            toggle.textContent = closed ? "▸" : "▾";
            if (!closed && !sub.dataset.loaded) { sub.dataset.loaded = "1"; load(full, sub); }
          };
          li.appendChild(toggle);
          li.appendChild(nameButton(entry, full));
          li.appendChild(sub);
        } else {
          li.appendChild(nameButton(entry, full));
        }
        into.appendChild(li);
      }
    }
    function nameButton(entry, full) {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "btn btn-sm btn-outline-secondary classhub-pick border-0";
      b.dataset.path = full;
      b.textContent = entry.name + (entry.type === "directory" ? "/" : "");
      b.onclick = () => {
        if (picked) picked.classList.remove("active");
        picked = b;
        b.classList.add("active");
        onPick(full, entry.type);
      };
      return b;
    }
    const root = document.createElement("ul");
    root.className = "classhub-tree";
    container.innerHTML = "";
    container.appendChild(root);
    load("", root);
  }

  /** Tables with class classhub-sortable sort by a column when its header is clicked. */
  function sortable(table) {
    table.querySelectorAll("th").forEach((th, i) => {
      th.style.cursor = "pointer";
      th.title = "sort";
      th.onclick = () => {
        const body = table.tBodies[0];
        const rows = Array.from(body.rows);
        const asc = th.dataset.sort !== "asc";
        table.querySelectorAll("th").forEach((h) => delete h.dataset.sort);
        th.dataset.sort = asc ? "asc" : "desc";
        const key = (r) => {
          const cell = r.cells[i];
          const v = cell ? (cell.dataset.value ?? cell.textContent.trim()) : "";
          const n = Number(v);
          return v !== "" && !Number.isNaN(n) ? n : v.toLowerCase();
        };
        rows.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0) * (asc ? 1 : -1));
        rows.forEach((r) => body.appendChild(r));
      };
    });
  }
  /** An ISO time in the one format of every classhub page: the browser's locale and time
   *  zone, date and minutes ("4 Dec 2026, 14:05" or "Dec 4, 2026, 2:05 PM"). */
  const timeFormat = new Intl.DateTimeFormat(undefined, {dateStyle: "medium", timeStyle: "short"});
  function when(iso) {
    const d = new Date(iso);
    return Number.isNaN(d.getTime()) ? String(iso ?? "") : timeFormat.format(d);
  }
  /** A sentence with ISO times in it (a waiting job's reason says "estimated start
   *  2026-12-04T14:20Z"), each time in the same format as every other time on the page. */
  const ISO_TIME = /\b\d{4}-\d\d-\d\dT\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:\d\d)/g;
  function timesIn(text) {
    return String(text ?? "").replace(ISO_TIME, (iso) => when(iso));
  }
  /** Show the ISO time in `el.dataset.localTime` in the reader's own time zone. */
  function localTime(el) {
    const d = new Date(el.dataset.localTime);
    if (!Number.isNaN(d.getTime())) {
      el.textContent = when(el.dataset.localTime);
      el.title = el.dataset.localTime;
    }
  }

  /** Fill `nav` with a link to each titled section of the page: a long page (a course's) is read
   * by jumping to the part one came for. Built from the sections the page holds, so a student's
   * course page lists its own, fewer, sections. */
  function sectionLinks(nav) {
    const list = document.createElement("ul");
    list.className = "nav small";
    document.querySelectorAll("section.classhub-section[id] > h2").forEach((title) => {
      const item = document.createElement("li");
      item.className = "nav-item";
      const link = document.createElement("a");
      link.className = "nav-link px-2 py-1";
      link.href = `#${title.parentElement.id}`;
      link.textContent = title.textContent.trim();
      item.append(link);
      list.append(item);
    });
    if (list.children.length > 1) nav.append(list);
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("nav.classhub-section-links").forEach(sectionLinks);
    document.querySelectorAll("table.classhub-sortable").forEach(sortable);
    document.querySelectorAll("[data-local-time]").forEach(localTime);
    document.querySelectorAll("[data-local-times]").forEach((el) => { el.textContent = timesIn(el.textContent); });
  });

  return {api, say, busy, esc, enc, tree, localTime, when, timesIn, get prefix() { return prefixOf(); }};
})();
