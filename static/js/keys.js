// keys.js — the keyboard: Space runs or pauses, → steps, ← goes back,
// r resets, ? opens the help, Esc closes it. A presenter's remote sends
// PageDown / PageUp (and . and b): they step and go back too. Keys are
// ignored while typing in a field.

const CHOICE = 'input[type="radio"], input[type="checkbox"], input[type="range"]';
const FIELD = "input, select, textarea, [contenteditable], [contenteditable=''], [contenteditable='true']";

export function bindKeys(act) {
  document.addEventListener("keydown", (ev) => {
    if (ev.defaultPrevented || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const t = ev.target;
    // A radio, a checkbox or a slider takes the arrows and Space itself, but
    // not a presenter's PageDown: picking an answer must not stop the lesson.
    if (t instanceof Element && t.matches(CHOICE)) {
      if (ev.key.startsWith("Arrow") || ev.key === " " || ev.key === "Spacebar" || ev.key === "Enter") return;
    } else if (t instanceof Element && t.closest(FIELD)) return;
    if (document.querySelector("dialog[open]") && ev.key !== "Escape" && ev.key !== "?") return;
    // A focused button or link answers Space and Enter itself.
    if ((ev.key === " " || ev.key === "Enter") && t instanceof Element && t.closest("button, a, summary")) return;
    switch (ev.key) {
      case " ":
      case "Spacebar":
        ev.preventDefault();
        act.runOrToggle();
        break;
      case "ArrowRight":
      case "PageDown":
      case ".":
        ev.preventDefault();
        act.stepForward();
        break;
      case "ArrowLeft":
      case "PageUp":
      case "b":
        ev.preventDefault();
        act.stepBack();
        break;
      case "r":
        act.reset();
        break;
      case "?":
        ev.preventDefault();
        act.toggleHelp();
        break;
      case "Escape":
        act.closeDialogs();
        break;
    }
  });
}
