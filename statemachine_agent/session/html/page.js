// statemachine-agent session replay: this project's own script (MIT), no third-party code.
// Builds the page from the JSON in #session-data. Every text from the log goes in through
// textContent (never innerHTML), so a log holding markup shows it as text.
"use strict";

const DATA = JSON.parse(document.getElementById("session-data").textContent);
const FOLD_CHARS = 1500; // longer texts show their start and a button to unfold
const FOLD_LINES = 20;

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function seconds(value) {
  if (value === null || value === undefined) return "?";
  if (value < 1) return (value * 1000).toFixed(value < 0.01 ? 1 : 0) + " ms";
  return value.toFixed(value < 10 ? 2 : 1) + " s";
}

function usageText(u) {
  if (!u) return "";
  let text = u.input_tokens + " in / " + u.output_tokens + " out";
  if (u.cache_read_tokens || u.cache_write_tokens) {
    text += " (cache read " + u.cache_read_tokens + ", write " + u.cache_write_tokens + ")";
  }
  return text + " tokens";
}

// A long text shows its start; the rest is put in only when asked for.
function foldedText(tag, className, text) {
  const box = el(tag, className);
  const lines = text.split("\n");
  if (text.length <= FOLD_CHARS && lines.length <= FOLD_LINES) {
    box.textContent = text;
    return box;
  }
  let head = lines.slice(0, FOLD_LINES).join("\n");
  if (head.length > FOLD_CHARS) head = head.slice(0, FOLD_CHARS);
  box.textContent = head + "\n…";
  const wrap = el("div");
  const button = el("button", "fold", "show all (" + lines.length + " lines, " + text.length + " characters)");
  button.type = "button";
  button.addEventListener("click", (event) => {
    event.stopPropagation();
    const open = button.dataset.open === "1";
    box.textContent = open ? head + "\n…" : text;
    button.dataset.open = open ? "0" : "1";
    button.textContent = open ? "show all (" + lines.length + " lines, " + text.length + " characters)" : "fold";
  });
  wrap.append(box, button);
  return wrap;
}

// A long list is built a chunk at a time, when the chunk comes near the visible part (or when a
// step needs one of its entries), so a 10,000-message log opens fast. Until then a chunk is an
// empty box of about its height.
const CHUNK = 200;

function lazyList(box, count, render, estimate, root) {
  const nodes = new Array(count);
  const chunks = [];
  const observer = new IntersectionObserver((entries) => {
    for (const entry of entries) if (entry.isIntersecting) fill(Number(entry.target.dataset.chunk));
  }, { root: root || null, rootMargin: "2000px 0px" });
  for (let c = 0; c * CHUNK < count; c++) {
    const chunk = el("div", "chunk");
    chunk.dataset.chunk = String(c);
    let height = 0;
    for (let i = c * CHUNK; i < Math.min(count, (c + 1) * CHUNK); i++) height += estimate(i);
    chunk.style.minHeight = height + "px";
    chunks.push(chunk);
    box.append(chunk);
  }
  function fill(c) {
    const chunk = chunks[c];
    if (!chunk || chunk.dataset.done) return;
    chunk.dataset.done = "1";
    observer.unobserve(chunk);
    const fragment = document.createDocumentFragment();
    for (let i = c * CHUNK; i < Math.min(count, (c + 1) * CHUNK); i++) {
      nodes[i] = render(i);
      fragment.append(nodes[i]);
    }
    chunk.append(fragment);
    chunk.style.minHeight = "";
  }
  return {
    node(i) { fill(Math.floor(i / CHUNK)); return nodes[i]; },
    // The chunks around entry i, so what a jump there scrolls into view is painted at once
    // (a screenshot taken at load shows it), not when the observer gets to it.
    around(i) { const c = Math.floor(i / CHUNK); fill(c - 1); fill(c); fill(c + 1); },
    observe() { chunks.forEach((chunk) => { if (!chunk.dataset.done) observer.observe(chunk); }); },
  };
}

// -- header ----------------------------------------------------------------------------------

function buildHeader() {
  const s = DATA.summary;
  document.getElementById("title").textContent = "Session " + s.file;
  const summary = document.getElementById("summary");
  const fields = [
    ["model", s.model || "?", "summary-model"],
    ["final state", s.state, "summary-state"],
    ["runs", s.runs, "summary-runs"],
    ["turns", s.turns, "summary-turns"],
    ["messages", s.messages, "summary-messages"],
    ["usage", usageText(s.usage), "summary-usage"],
    ["repairs", s.repairs, "summary-repairs"],
    ["tools", s.tools.join(", ") || "none", "summary-tools"],
    ["created", s.created || "?", "summary-created"],
  ];
  for (const [name, value, id] of fields) {
    const row = el("div");
    const dd = el("dd", null, value);
    dd.id = id;
    row.append(el("dt", null, name), dd);
    summary.append(row);
  }
  const notes = document.getElementById("notes");
  for (const note of s.notes) notes.append(el("li", null, note));
}

// -- transcript ------------------------------------------------------------------------------

let items = null; // lazyList of the transcript: items.node(index) -> element
const callNodes = new Map(); // tool call id -> its block in the assistant message (once built)
const callItem = new Map(); // tool call id -> index of the assistant message holding it

const TOP = { steps: DATA.steps, top: true }; // the scope of the logged agent's own items

// An item of the transcript; `scope` is TOP, or a sub-agent run's (its own steps; its calls are
// not the page's: call ids repeat across runs).
function buildItem(item, index, scope) {
  scope = scope || TOP;
  const node = el("article", "item " + item.kind);
  node.dataset.index = String(index);
  if (item.step !== null) node.dataset.step = String(item.step);
  const head = el("div");
  switch (item.kind) {
    case "user":
      head.append(el("span", "who", "user"));
      node.append(head, foldedText("div", "text", item.text));
      break;
    case "assistant": {
      head.append(el("span", "who", "assistant"));
      head.append(el("span", "meta", "turn " + item.turn + " · stop " + item.stop + " · " + usageText(item.usage)));
      node.append(head);
      if (item.error) node.append(el("div", "badge error", item.error));
      for (const block of item.blocks) {
        if (block.type === "text") {
          if (block.text.trim()) node.append(foldedText("div", "text", block.text));
        } else if (block.type === "thinking") {
          const details = el("details", "thinking");
          details.append(el("summary", null, "thinking (" + block.text.length + " characters)"));
          details.append(foldedText("div", "text", block.text));
          node.append(details);
        } else if (block.type === "call") {
          const call = el("div", "call");
          call.dataset.call = block.id;
          const title = el("div");
          title.append(el("span", "who", "→ " + block.name), el("span", "meta", block.id));
          if (block.truncated) title.append(el("span", "badge error", "truncated by max_tokens: not run"));
          const args = block.raw !== null ? block.raw : JSON.stringify(block.input, null, 2);
          call.append(title, foldedText("pre", "args", args === undefined ? "null" : args));
          // A sub-agent whose call the log ends in (no result): its run so far, under the call.
          if (block.child) call.append(buildChild(block.child));
          if (scope.top) callNodes.set(block.id, call);
          node.append(call);
        } else {
          node.append(el("div", "meta", block.text));
        }
      }
      break;
    }
    case "result":
      if (item.error) node.classList.add("error");
      if (item.repair) node.classList.add("repair");
      node.dataset.call = item.call;
      head.append(el("span", "who", (item.error ? "✗ " : "✓ ") + item.name), el("span", "meta", item.call));
      if (item.error) head.append(el("span", "badge error", "error"));
      if (item.repair) head.append(el("span", "badge repair", "repair: answered on resume"));
      node.append(head, foldedText("pre", "result-text", item.text));
      if (item.child) node.append(buildChild(item.child));
      break;
    case "state": {
      const step = scope.steps[item.step];
      node.textContent = (step.recovered ? "⚠ " : "") + step.source + " → " + step.dest +
        "  (" + step.trigger + ": " + step.label + ")";
      break;
    }
    case "run_start":
      node.textContent = "run " + item.run + " started";
      break;
    case "run_end":
      node.textContent = "run " + item.run + " ended: " + item.state +
        (item.turns !== null && item.turns !== undefined ? " · " + item.turns + " turns" : "") +
        " · " + usageText(item.usage);
      if (item.error) node.append(el("div", "meta", item.error));
      break;
    case "history":
      node.textContent = "history replaced (" + item.reason + "): " + item.count + " messages";
      if (item.summary) node.append(foldedText("div", "meta", item.summary));
      break;
    case "crash":
      node.textContent = "✖ " + item.text;
      break;
    case "pending":
      node.dataset.call = item.call;
      head.append(el("span", "who", "⏸ " + item.name), el("span", "meta", item.call),
                  el("span", "badge waiting", "waiting for approval"));
      node.append(head);
      if (item.text) node.append(el("div", "meta", item.text));
      break;
    case "decision": {
      const approved = item.decision === "approve";
      node.dataset.call = item.call;
      head.append(el("span", "who", (approved ? "✔ approved " : "✘ denied ") + (item.name || "call")),
                  el("span", "meta", item.call));
      node.append(head);
      if (item.text) node.append(el("div", "meta", item.text));
      break;
    }
  }
  if (item.time !== null && item.time !== undefined) node.title = "+" + seconds(item.time);
  return node;
}

const HEIGHTS = { state: 24, run_start: 40, run_end: 40, user: 70, result: 90, assistant: 150,
                  pending: 60, decision: 50 };

function buildTranscript() {
  const box = document.getElementById("transcript");
  DATA.items.forEach((item, index) => {
    if (item.kind === "assistant") {
      for (const block of item.blocks) if (block.type === "call") callItem.set(block.id, index);
    }
  });
  items = lazyList(box, DATA.items.length, (i) => buildItem(DATA.items[i], i),
                   (i) => HEIGHTS[DATA.items[i].kind] || 60, box);
  box.addEventListener("click", (event) => {
    if (event.target.closest("button, summary, details[open] > div")) return;
    const node = event.target.closest(".item");
    if (node && node.dataset.step !== undefined) show(Number(node.dataset.step));
  });
}

// A sub-agent's run, folded under the call that ran it: a strip of the states it went through
// (click one to light it in the diagram with its items) over its own transcript, built when
// first unfolded.
function buildChild(child) {
  const box = el("details", "child-run");
  box.dataset.call = child.call;
  const summary = el("summary", null, "sub-agent " + child.tool + " (run " + child.run_id + "): " +
    child.state + " · " + child.turns + " turns · " + usageText(child.usage));
  box.append(summary);
  let built = false;
  // Built on the summary's click, before it opens (the toggle event comes later, queued: a
  // reader, or a test, clicking a chip right after opening finds it there), or on any other
  // opening (the toggle).
  const build = () => {
    if (built) return;
    built = true;
    const strip = el("div", "child-states");
    const chips = child.steps.map((step, k) => {
      const chip = el("button", "child-state", step.dest);
      chip.type = "button";
      chip.dataset.state = step.dest;
      chip.dataset.step = String(k);
      chip.title = step.source + " → " + step.dest + " (" + step.trigger + ": " + step.label + ")";
      strip.append(chip);
      return chip;
    });
    const body = el("div", "child-items");
    const scope = { steps: child.steps, top: false };
    const nodes = child.items.map((item, i) => body.appendChild(buildItem(item, i, scope)));
    box.append(strip, body);
    strip.addEventListener("click", (event) => {
      const chip = event.target.closest(".child-state");
      if (!chip) return;
      event.stopPropagation();
      showChild(child, Number(chip.dataset.step), chips, nodes);
    });
    body.addEventListener("click", (event) => {
      if (event.target.closest("button, summary")) return;
      const node = event.target.closest(".item");
      if (!node || node.parentElement !== body || node.dataset.step === undefined) return;
      event.stopPropagation();
      showChild(child, Number(node.dataset.step), chips, nodes);
    });
  };
  summary.addEventListener("click", build);
  box.addEventListener("toggle", () => { if (box.open) build(); });
  return box;
}

// Light step k of a sub-agent's run: its state (and edge) in the diagram, its chip and items.
function showChild(child, k, chips, nodes) {
  for (const node of lit) node.classList.remove("lit", "current", "taken");
  lit = [];
  const step = child.steps[k];
  const mark = (node, cls) => { if (node) { node.classList.add(cls); lit.push(node); } };
  const state = document.getElementById(step.node);
  // An extra edge's id is the sub-agent's own numbering: not drawn on this diagram.
  const edge = step.edge && !step.edge.startsWith("edge_x") ? document.getElementById(step.edge) : null;
  mark(state, "current");
  mark(edge, "taken");
  follow([state, ...(edge ? edgeParts(edge) : [])].filter(Boolean));
  mark(chips[k], "current");
  for (const i of step.items) mark(nodes[i], "lit");
  document.getElementById("step-text").textContent = "sub-agent " + child.tool + " (call " +
    child.call + ") step " + (k + 1) + " / " + child.steps.length + ": " + step.source + " → " +
    step.dest + " (" + step.trigger + ": " + step.label + ")";
  document.body.dataset.state = step.dest;
}

// -- timeline --------------------------------------------------------------------------------

let turns = null; // lazyList of the timeline: turns.node(index) -> row

function bar(className, start, end, origin, scale, label) {
  const node = el("div", "bar " + className);
  const from = start === null ? 0 : start - origin;
  const to = end === null ? from : end - origin;
  node.style.left = (100 * from / scale) + "%";
  node.style.width = (100 * Math.max(to - from, 0) / scale) + "%";
  // The label sits inside a wide bar, before a narrow one near the right end, else after it.
  const place = (to - from) / scale > 0.35 ? " inside" : to / scale > 0.6 ? " before" : "";
  node.append(el("span", "bar-text" + place, label));
  node.title = label;
  return node;
}

// A tool call's bar: from its start to its end (or to where the log ends, while it waits). Time
// it waited for a person's decision is drawn apart, as the bar's hatched first part, and is not
// counted as the call's running time.
function callBar(c, origin, scale) {
  const waiting = c.end === null && c.waiting;
  const kind = c.repair ? "repair" : waiting ? "waiting" : c.error ? "error" : "ok";
  const end = waiting ? DATA.end : c.end;
  let label;
  if (waiting) label = c.name + " waiting for approval";
  else if (c.end === null) label = c.name + " no result";
  else label = c.name + " " + seconds(c.end - c.run);
  if (c.repair) label += " (no result: the process died)";
  const wait = c.wait;
  if (wait && !waiting && wait.to !== null) {
    label += " (after " + seconds(wait.to - wait.from) + " waiting for approval" +
      (c.decision === "deny" ? ": denied" : "") + ")";
  }
  const node = bar(kind, c.start, end, origin, scale, label);
  node.dataset.call = c.id;
  if (wait && wait.from !== null && end !== null && end > c.start) {
    node.classList.add("has-wait");
    const to = wait.to === null ? end : wait.to;
    const part = el("div", "wait");
    part.style.left = (100 * (wait.from - c.start) / (end - c.start)) + "%";
    part.style.width = (100 * Math.max(to - wait.from, 0) / (end - c.start)) + "%";
    part.title = "waiting for approval " + seconds(to - wait.from);
    node.prepend(part);
  }
  return node;
}

function buildTimeline() {
  const box = document.getElementById("timeline");
  let scale = 0;
  for (const t of DATA.turns) {
    const last = t.end !== null ? t.end : Math.max(t.reply || 0, ...t.calls.map((c) => c.end || (c.waiting ? DATA.end : 0) || 0));
    if (t.start !== null) scale = Math.max(scale, last - t.start);
  }
  scale = scale || 1;
  const render = (k) => {
    const t = DATA.turns[k];
    const row = el("div", "turn");
    row.dataset.step = String(t.step);
    const origin = t.start === null ? 0 : t.start;
    const end = t.end !== null ? t.end : t.reply;
    const total = end === null || t.start === null ? null : end - t.start;
    let text = "turn " + t.n + " · run " + t.run + " · " + seconds(total === null ? null : total - t.waited);
    if (t.waited > 0) text += " + " + seconds(t.waited) + " waiting for approval";
    row.append(el("div", "turn-label", text));
    row.title = text + ": " + usageText(t.usage);
    const lanes = el("div", "lanes");
    const model = el("div", "lane");
    model.append(bar("model", t.start, t.reply, origin, scale, "model " + seconds(t.reply === null || t.start === null ? null : t.reply - t.start)));
    lanes.append(model);
    for (const c of t.calls) {
      const lane = el("div", "lane");
      lane.append(callBar(c, origin, scale));
      lanes.append(lane);
    }
    row.append(lanes);
    row.addEventListener("click", () => show(t.step_tools !== undefined ? t.step_tools : t.step));
    return row;
  };
  turns = lazyList(box, DATA.turns.length, render, (k) => 24 + 18 * DATA.turns[k].calls.length, box);
}

// -- the diagram: pan and zoom -------------------------------------------------------------------
// The SVG fills #viewport; its viewBox is the part of the drawing on screen, so the drawing stays
// sharp at every scale. `view.scale` is screen pixels per SVG unit. The page opens at a scale
// where state names are LEGIBLE_PX tall (or the whole diagram, if that fits larger), and each
// step pans, zooming out only when it has to, so that its lit state and lit edge are in view.

const LEGIBLE_PX = 13; // the size state names are drawn at when the page opens (CSS px)
const MARGIN = 12; // px kept between a lit element and the viewport's edge
const view = { svg: null, box: null, full: null, x: 0, y: 0, scale: 1, font: 14 };

function viewSize() {
  return { w: view.box.clientWidth, h: view.box.clientHeight };
}

function fitScale() {
  const { w, h } = viewSize();
  return Math.min((w - 2 * MARGIN) / view.full.width, (h - 2 * MARGIN) / view.full.height);
}

function legibleScale() {
  return LEGIBLE_PX / view.font;
}

// Put the SVG point (x, y) at the viewport's top left, at `scale`; the drawing is kept on screen
// (centred on an axis where it is smaller than the viewport).
function setView(x, y, scale) {
  if (!view.svg) return;
  const { w, h } = viewSize();
  if (!w || !h) return;
  const low = Math.min(fitScale(), legibleScale()) / 2;
  const high = legibleScale() * 6;
  scale = Math.max(low, Math.min(high, scale));
  const vw = w / scale, vh = h / scale;
  const f = view.full;
  x = vw >= f.width ? f.x - (vw - f.width) / 2 : Math.max(f.x, Math.min(f.x + f.width - vw, x));
  y = vh >= f.height ? f.y - (vh - f.height) / 2 : Math.max(f.y, Math.min(f.y + f.height - vh, y));
  Object.assign(view, { x, y, scale });
  view.svg.setAttribute("viewBox", [x, y, vw, vh].map((v) => v.toFixed(2)).join(" "));
  view.svg.dataset.scale = scale.toFixed(4);
}

// The SVG point under the window point (cx, cy).
function svgPoint(cx, cy) {
  const r = view.box.getBoundingClientRect();
  return { x: view.x + (cx - r.left) / view.scale, y: view.y + (cy - r.top) / view.scale };
}

function zoomAt(scale, cx, cy) {
  const p = svgPoint(cx, cy);
  const r = view.box.getBoundingClientRect();
  const next = Math.max(Math.min(fitScale(), legibleScale()) / 2, Math.min(legibleScale() * 6, scale));
  setView(p.x - (cx - r.left) / next, p.y - (cy - r.top) / next, next);
}

function zoomCentre(factor) {
  const r = view.box.getBoundingClientRect();
  zoomAt(view.scale * factor, r.left + r.width / 2, r.top + r.height / 2);
}

function fit() {
  const { w, h } = viewSize();
  const scale = fitScale();
  const f = view.full;
  setView(f.x - (w / scale - f.width) / 2, f.y - (h / scale - f.height) / 2, scale);
}

// The box (in SVG units) around the elements, or null.
function svgBox(elements) {
  let box = null;
  for (const element of elements) {
    const r = element.getBoundingClientRect();
    if (!r.width && !r.height) continue;
    const a = svgPoint(r.left, r.top), b = svgPoint(r.right, r.bottom);
    box = box ? { x1: Math.min(box.x1, a.x), y1: Math.min(box.y1, a.y), x2: Math.max(box.x2, b.x),
                  y2: Math.max(box.y2, b.y) } : { x1: a.x, y1: a.y, x2: b.x, y2: b.y };
  }
  return box;
}

// What of a lit edge must be on screen: its label and its arrowhead (at the state it enters), or
// the whole edge when it has no label.
function edgeParts(edge) {
  const parts = [...edge.querySelectorAll("text, polygon")];
  return parts.length ? parts : [edge];
}

// Bring the elements into view: nothing moves when they are on screen; else the view is centred
// on them, zoomed out (never below the whole diagram's fit) only when they do not fit.
function follow(elements) {
  if (!view.svg || !elements.length) return;
  const { w, h } = viewSize();
  if (!w || !h) return;
  const box = svgBox(elements);
  if (!box) return;
  const m = MARGIN / view.scale;
  const inView = box.x1 - m >= view.x && box.y1 - m >= view.y &&
    box.x2 + m <= view.x + w / view.scale && box.y2 + m <= view.y + h / view.scale;
  if (inView) return;
  const need = Math.min((w - 2 * MARGIN) / (box.x2 - box.x1), (h - 2 * MARGIN) / (box.y2 - box.y1));
  const scale = Math.max(Math.min(view.scale, need), Math.min(fitScale(), view.scale));
  const cx = (box.x1 + box.x2) / 2, cy = (box.y1 + box.y2) / 2;
  setView(cx - w / scale / 2, cy - h / scale / 2, scale);
}

function buildDiagram() {
  const box = document.getElementById("viewport");
  const svg = box.querySelector("svg");
  if (!svg) return;
  view.svg = svg;
  view.box = box;
  const vb = svg.viewBox.baseVal;
  const whole = vb && vb.width ? vb : svg.getBBox();
  view.full = { x: whole.x, y: whole.y, width: whole.width, height: whole.height };
  // State names: the first text of each state; the smallest sets the legible scale.
  const sizes = [...svg.querySelectorAll(".node")].map((node) => {
    const text = node.querySelector("text");
    return text ? parseFloat(text.getAttribute("font-size") || getComputedStyle(text).fontSize) : NaN;
  }).filter((size) => size > 0);
  if (sizes.length) view.font = Math.min(...sizes);
  svg.removeAttribute("width");
  svg.removeAttribute("height");
  svg.setAttribute("preserveAspectRatio", "xMinYMin meet");
  const scale = Math.max(fitScale(), legibleScale());
  const { w, h } = viewSize();
  const f = view.full;
  setView(f.x + (f.width - w / scale) / 2, f.y + (f.height - h / scale) / 2, scale);

  box.addEventListener("wheel", (event) => {
    event.preventDefault();
    const lines = event.deltaMode === 1 ? 16 : event.deltaMode === 2 ? 400 : 1;
    zoomAt(view.scale * Math.exp(-event.deltaY * lines * 0.0015), event.clientX, event.clientY);
  }, { passive: false });
  let drag = null;
  box.addEventListener("pointerdown", (event) => {
    if (event.button !== 0) return;
    drag = { id: event.pointerId, cx: event.clientX, cy: event.clientY, x: view.x, y: view.y };
    box.setPointerCapture(event.pointerId);
    box.classList.add("dragging");
  });
  box.addEventListener("pointermove", (event) => {
    if (!drag || event.pointerId !== drag.id) return;
    setView(drag.x - (event.clientX - drag.cx) / view.scale,
            drag.y - (event.clientY - drag.cy) / view.scale, view.scale);
  });
  const drop = (event) => {
    if (!drag || event.pointerId !== drag.id) return;
    drag = null;
    box.classList.remove("dragging");
  };
  box.addEventListener("pointerup", drop);
  box.addEventListener("pointercancel", drop);
  document.getElementById("zoom-in").addEventListener("click", () => zoomCentre(1.25));
  document.getElementById("zoom-out").addEventListener("click", () => zoomCentre(0.8));
  document.getElementById("zoom-fit").addEventListener("click", fit);
  document.addEventListener("keydown", (event) => {
    if (event.altKey || event.ctrlKey || event.metaKey) return;
    const zooms = { "+": () => zoomCentre(1.25), "=": () => zoomCentre(1.25), "-": () => zoomCentre(0.8), "0": fit };
    if (event.key in zooms) {
      event.preventDefault();
      zooms[event.key]();
    }
  });
  window.addEventListener("resize", () => setView(view.x, view.y, view.scale));
}

// -- stepping --------------------------------------------------------------------------------

let current = -1;
let lit = [];

function turnOfStep(index) {
  let found = -1;
  for (let k = 0; k < DATA.turns.length && DATA.turns[k].step <= index; k++) found = k;
  return found;
}

function show(index, block) {
  const steps = DATA.steps;
  if (!steps.length) return;
  index = Math.max(0, Math.min(steps.length - 1, index));
  for (const node of lit) node.classList.remove("lit", "current", "taken");
  lit = [];
  current = index;
  const step = steps[index];
  const mark = (node, cls) => { if (node) { node.classList.add(cls); lit.push(node); } };
  const state = document.getElementById(step.node);
  const edge = step.edge ? document.getElementById(step.edge) : null;
  mark(state, "current");
  mark(edge, "taken");
  follow([state, ...(edge ? edgeParts(edge) : [])].filter(Boolean));
  for (const i of step.items) mark(items.node(i), "lit");
  for (const id of step.calls) {
    if (callItem.has(id)) items.node(callItem.get(id)); // builds the block
    mark(callNodes.get(id), "lit");
  }
  const turn = turnOfStep(index);
  if (turn >= 0 && DATA.turns[turn].run === step.run) mark(turns.node(turn), "lit");
  document.getElementById("step-count").textContent = "step " + (index + 1) + " / " + steps.length;
  document.getElementById("step-text").textContent = step.source + " → " + step.dest +
    " (" + step.trigger + ": " + step.label + ")" + (step.recovered ? " — recovered after the process died" : "");
  document.body.dataset.state = step.dest;
  document.body.dataset.step = String(index + 1);
  if (step.items.length) items.around(step.items[0]);
  if (turn >= 0) turns.around(turn);
  const first = step.calls.length ? callNodes.get(step.calls[0]) : items.node(step.items[0]);
  if (first) first.scrollIntoView({ block: block || "nearest" });
  if (turn >= 0) turns.node(turn).scrollIntoView({ block: "nearest" });
  if (location.hash !== "#step=" + (index + 1)) {
    history.replaceState(null, "", "#step=" + (index + 1));
  }
}

// The step a URL names (#step=N, counted from 1 as the page shows it), else the first.
function stepOfUrl() {
  const match = /^#step=(\d+)$/.exec(location.hash);
  return match ? Number(match[1]) - 1 : 0;
}

function buildControls() {
  document.getElementById("first").addEventListener("click", () => show(0));
  document.getElementById("prev").addEventListener("click", () => show(current - 1));
  document.getElementById("next").addEventListener("click", () => show(current + 1));
  document.getElementById("last").addEventListener("click", () => show(DATA.steps.length - 1));
  document.addEventListener("keydown", (event) => {
    if (event.altKey || event.ctrlKey || event.metaKey) return;
    const moves = { ArrowRight: current + 1, j: current + 1, ArrowLeft: current - 1, k: current - 1,
                    Home: 0, End: DATA.steps.length - 1 };
    if (event.key in moves) {
      event.preventDefault();
      show(moves[event.key]);
    }
  });
}

buildHeader();
buildDiagram();
buildTranscript();
buildTimeline();
buildControls();
items.node(0);
turns.node(0);
// The page opens at the first step (or the URL's): what is on screen is built before the first
// paint (the window itself never scrolls; see page.css).
show(stepOfUrl(), "center");
window.addEventListener("hashchange", () => show(stepOfUrl(), "center"));
items.observe();
turns.observe();
document.body.dataset.ready = "1";
