// share.js — sharing a session: the share dialog (the watch and drive
// links, the embed code, present mode, the lesson) and the watch link as
// a QR code for students' phones, on the address the server picks or
// another the presenter picks (kept in this browser).

import { byTest, esc } from "./dom.js";
import * as host from "./embed.js";

const addrKey = "fencelab.watch-addr";

/**
 * Wire the share dialog and the QR codes of a session. `token()` is the
 * control token now (a stale one is dropped after start); `query(extra)`
 * is the page's permalink query. Returns drawJoin, which draws the join box's
 * QR code (present mode).
 */
export function sharing({ boot, sessionId, token, query }) {
  const addresses = boot.addresses || [];
  function pickedAddress() {
    let ip = "";
    try { ip = localStorage.getItem(addrKey) || ""; } catch { /* storage may be off */ }
    return addresses.find((a) => a.ip === ip) || addresses.find((a) => a.default) || null;
  }
  function drawQR(img, note, select, wrap) {
    if (!sessionId) return;
    const a = boot.reachable ? pickedAddress() : null;
    const url = a ? a.url : boot.watch_url;
    img.src = `/s/${encodeURIComponent(sessionId)}/qr.svg${a && !a.default ? `?addr=${encodeURIComponent(a.ip)}` : ""}`;
    img.dataset.addr = a ? a.ip : "";
    note.textContent = boot.reachable
      ? `Students: scan to watch live, or open ${url}`
      : `This server listens on this machine only (${boot.watch_url}): phones cannot reach it. Start it with --addr :8080 to let a classroom join.`;
    wrap.hidden = !boot.reachable || addresses.length < 2;
    if (wrap.hidden) return;
    select.innerHTML = addresses.map((x) => `<option value="${esc(x.ip)}">${esc(x.ip)} (${esc(x.name)}${x.default ? ", the default route" : ""})</option>`).join("");
    select.value = a ? a.ip : "";
  }
  const qr = (name) => [byTest(`${name}-qr`), byTest(`${name}-${name === "join" ? "note" : "qr-note"}`), byTest(`${name}-addr`), byTest(`${name}-addr-wrap`)];
  const drawJoin = () => drawQR(...qr("join"));
  const drawShare = () => drawQR(...qr("share"));
  for (const [name, draw] of [["share", drawShare], ["join", drawJoin]]) {
    byTest(`${name}-addr`).addEventListener("change", (ev) => {
      try { localStorage.setItem(addrKey, ev.target.value); } catch { /* fine */ }
      draw();
      if (boot.present) drawJoin();
    });
  }

  byTest("share").addEventListener("click", () => {
    const base = `${location.origin}/s/${sessionId}`;
    byTest("share-watch").value = base;
    const t = token();
    byTest("share-drive").value = t ? `${base}#token=${t}` : "";
    byTest("share-drive-wrap").hidden = !t;
    const q = query({ embed: false, present: false });
    byTest("embed-code").value = host.embedCode(q);
    byTest("present-link").href = `/?present=1&${q}`;
    drawShare();
    byTest("lesson-link").href = "/?lesson=predict&present=1";
    byTest("copied").textContent = "";
    byTest("share-dialog").showModal();
  });
  byTest("copy-embed").addEventListener("click", async () => {
    const ta = byTest("embed-code");
    try {
      await navigator.clipboard.writeText(ta.value);
      byTest("copied").textContent = "Copied.";
    } catch {
      ta.select();
      byTest("copied").textContent = "Selected: press Ctrl+C (or ⌘C) to copy.";
    }
  });
  return { drawJoin };
}
