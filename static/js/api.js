// api.js — the session's JSON API and its WebSocket, which resumes after a
// drop from the last sequence number it saw: no gap, no duplicate.

/** Where a tab keeps the token that drives session id (sessionStorage): the page reads it, a class's join writes it. */
export const driveTokenKey = (id) => `fencelab.token.${id}`;

/**
 * The control token: handed to the page that made the session (given),
 * carried in a drive link's #token=, or kept in this tab from before
 * (under key); kept in the tab from now on. Never in the URL bar.
 */
export function controlToken(given, key) {
  let token = new URLSearchParams(location.hash.slice(1)).get("token") || given || "";
  if (!token) { try { token = sessionStorage.getItem(key) || ""; } catch { /* storage may be off */ } }
  if (token) { try { sessionStorage.setItem(key, token); } catch { /* fine */ } }
  return token;
}

export class ApiError extends Error {
  constructor(status, code, message, detail) {
    super(message);
    this.status = status;
    this.code = code; // the server's fault code: invalid, busy, conflict, ...
    // What a refusal says besides its sentence, for a program: a reader's
    // statement's {kind, code, position, sqlstate}; undefined when none.
    this.detail = detail;
  }
}

export class Api {
  constructor(sessionId, token) {
    this.sessionId = sessionId;
    this.token = token || "";
  }

  /** Send one command; resolves with the result or rejects with ApiError. */
  async command(cmd) {
    const res = await fetch(`/api/sessions/${encodeURIComponent(this.sessionId)}/commands`, {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${this.token}` },
      body: JSON.stringify(cmd),
    });
    let body = {};
    try { body = await res.json(); } catch { /* an empty or broken answer: the status says enough */ }
    if (!res.ok) throw new ApiError(res.status, body.code || "", body.error || `HTTP ${res.status}`, body.detail);
    return body;
  }

  async get(path) {
    const res = await fetch(`/api/sessions/${encodeURIComponent(this.sessionId)}${path}`);
    const body = await res.json().catch(() => ({}));
    if (!res.ok) throw new ApiError(res.status, body.code || "", body.error || `HTTP ${res.status}`, body.detail);
    return body;
  }

  /** Every event of one run, in order. */
  async runEvents(runId) {
    let since = 0;
    const all = [];
    for (;;) {
      const page = await this.get(`/events?run=${encodeURIComponent(runId)}&since=${since}&limit=10000`);
      all.push(...page.events);
      if (!page.more || page.events.length === 0) return all;
      since = page.events[page.events.length - 1].seq;
    }
  }
}

/**
 * Stream keeps one WebSocket to the session open: every event after the
 * last seq it has seen, in order, exactly once. When the socket drops it
 * reconnects (backing off up to 5 s) and resumes; it reports how it is
 * doing through onStatus({state, behind, caughtUp, reconnects}).
 */
export class Stream {
  constructor({ sessionId, token, since, onEvent, onStatus, onGone }) {
    this.sessionId = sessionId;
    this.token = token || "";
    this.last = since || 0;
    this.onEvent = onEvent;
    this.onStatus = onStatus;
    this.onGone = onGone;
    this.reconnects = 0;
    this.caughtUp = 0;
    this.delay = 250;
    this.closed = false;
    this.state = "connecting";
    this.behind = 0;
  }

  url() {
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    let u = `${proto}//${location.host}/api/sessions/${encodeURIComponent(this.sessionId)}/ws?since=${this.last}`;
    if (this.token) u += `&token=${encodeURIComponent(this.token)}`;
    return u;
  }

  status(state) {
    this.state = state;
    this.onStatus({ state, behind: this.behind, caughtUp: this.caughtUp, reconnects: this.reconnects, last: this.last });
  }

  open() {
    if (this.closed) return;
    const ws = new WebSocket(this.url());
    this.ws = ws;
    let fromSeq = this.last;
    let sawLive = false;
    this.status(this.reconnects ? "reconnecting" : "connecting");
    ws.onmessage = (m) => {
      let f;
      try { f = JSON.parse(m.data); } catch { return; }
      if (f.type === "hello") {
        this.behind = Math.max(0, f.last_seq - this.last);
        this.status(this.behind > 0 ? "behind" : "connecting");
      } else if (f.type === "event") {
        const e = f.event;
        if (e.seq <= this.last) return; // already seen: never twice
        this.last = e.seq;
        if (!sawLive) this.behind = Math.max(0, this.behind - 1);
        this.onEvent(e, !sawLive);
      } else if (f.type === "live") {
        sawLive = true;
        this.delay = 250;
        this.behind = 0;
        if (this.reconnects > 0) this.caughtUp = this.last - fromSeq;
        this.status("live");
      }
    };
    ws.onclose = (ev) => {
      if (this.closed) return;
      // 4001: the events asked for are no longer kept; 4002: the session ended.
      if (ev.code === 4001 || ev.code === 4002) { this.status("offline"); if (this.onGone) this.onGone(ev.code); return; }
      this.reconnects++;
      this.status("reconnecting");
      setTimeout(() => this.open(), this.delay);
      this.delay = Math.min(5000, this.delay * 2);
    };
  }

  /** Drop the socket as a network would; it comes back by itself. */
  drop() {
    if (this.ws) this.ws.close(4000, "dropped on purpose");
  }

  close() {
    this.closed = true;
    if (this.ws) this.ws.close(1000, "bye");
  }
}
