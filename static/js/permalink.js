// permalink.js — the setup as an address: the form's controls to a query
// string and back. /?ordering=zombie-first&mode=step&break=epoch-check&
// same=1&lease=1500&pace=900&style=token reproduces that setup.

/**
 * The setup the form's controls say now, read from the controls
 * themselves, disabled or not: a watcher's controls are disabled, and
 * FormData would leave them out (its permalink read ordering=null).
 */
export function setupFromForm(form) {
  const f = form.elements;
  const picked = (name) => (form.querySelector(`input[name="${name}"]:checked`) || {}).value;
  const broken = [...form.querySelectorAll('input[name="guard"]')].filter((c) => !c.checked).map((c) => c.value);
  return {
    ordering: f.ordering.value, mode: f.mode.value, style: picked("style") || "fencelab", broken, delivery: picked("delivery") || "direct",
    same: f.same.checked, lease: Number(f.lease.value), pace: Number(f.pace.value), skew: Number(f.skew.value),
  };
}

/** The query string of a setup; styles is the catalog's list of queue styles. */
export function permalinkQuery(s, styles, { embed = false, present = false } = {}) {
  const q = new URLSearchParams();
  q.set("ordering", s.ordering);
  if (s.ordering !== "free-play") q.set("mode", s.mode);
  if (s.style && s.style !== "fencelab") q.set("style", s.style);
  const styleBroken = ((styles.find((x) => x.name === s.style) || {}).broken || "").split(",");
  const extra = s.broken.filter((g) => !styleBroken.includes(g));
  if (extra.length) q.set("break", extra.join(","));
  if (s.same) q.set("same", "1");
  if (s.delivery && s.delivery !== "direct") q.set("delivery", s.delivery);
  q.set("lease", String(s.lease));
  if (s.ordering !== "free-play") q.set("pace", String(s.pace));
  if (s.ordering === "clock-skew" && s.skew) q.set("skew", String(s.skew));
  if (embed) q.set("embed", "1");
  if (present) q.set("present", "1");
  return q.toString();
}

/** The run command of a setup. */
export function runCommand(s, mode) {
  const cmd = { action: "run", ordering: s.ordering, broken: s.broken, same_identity: s.same, lease_ms: s.lease };
  if (s.ordering !== "free-play") {
    cmd.mode = mode || s.mode;
    cmd.pace_ms = s.pace;
  }
  if (s.ordering === "clock-skew" && s.skew) cmd.skew_ms = s.skew;
  if (s.ordering !== "free-play" && s.delivery && s.delivery !== "direct") cmd.delivery = s.delivery;
  return cmd;
}

/**
 * Set the form's controls from a setup message (a host page's, or a run's
 * own summary): only the fields it has, and only values the form offers.
 */
export function applySetup(form, m) {
  const f = form.elements;
  if (typeof m.ordering === "string" && [...f.ordering.options].some((o) => o.value === m.ordering)) f.ordering.value = m.ordering;
  if (m.mode === "auto" || m.mode === "step") f.mode.value = m.mode;
  if (Array.isArray(m.broken)) for (const c of form.querySelectorAll('input[name="guard"]')) c.checked = !m.broken.includes(c.value);
  if (typeof m.same_identity === "boolean") f.same.checked = m.same_identity;
  if (typeof m.delivery === "string") for (const r of form.querySelectorAll('input[name="delivery"]')) r.checked = r.value === m.delivery;
  const num = (name, v) => { if (Number.isFinite(v)) f[name].value = String(v); };
  num("lease", m.lease_ms);
  num("pace", m.pace_ms);
  num("skew", m.skew_ms);
}
