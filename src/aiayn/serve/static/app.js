// The page: translate, the attention of every layer and head, the beam-search tree with forcing.
"use strict";

const state = {model: null, explained: null, source: "", forced: null, treeZoom: null, panned: false};

function $(id) { return document.getElementById(id); }

function setStatus(text, error = false) {
  const status = $("status");
  status.textContent = text;
  status.classList.toggle("error", error);
}

// The served models, once the server has loaded them (it answers 503 while they load).
async function loadModels() {
  for (;;) {
    const reply = await fetch("/api/model");
    if (reply.ok) return (await reply.json()).models;
    const health = await (await fetch("/api/health")).json();
    if (reply.status !== 503 || health.status === "failed") {
      const failed = Object.values(health.models || {}).find((s) => s.startsWith("failed"));
      throw new Error(failed || `the server answered ${reply.status}`);
    }
    setStatus("the server is loading its models…");
    await new Promise((done) => setTimeout(done, 1000));
  }
}

function fillModelPicker(models) {
  const select = $("model-select");
  for (const m of models) {
    const langs = m.source_lang && m.target_lang ? ` (${m.source_lang} → ${m.target_lang})` : "";
    el("option", {value: m.name}, select, m.name + langs);
  }
  select.disabled = models.length < 2;
  select.addEventListener("change", async () => {
    clearResults();
    showModel(models.find((m) => m.name === select.value));
    await modelFigures(state.model);
  });
}

function showModel(m) {
  state.model = m;
  setStatus("");
  const langs = m.source_lang && m.target_lang ? `${m.source_lang} → ${m.target_lang}` : "languages not recorded";
  $("model-info").textContent = `${m.name}: ${langs}; ${m.encoder.layers} + ${m.decoder.layers} layers, ` +
    `d_model ${m.config.d_model}, ${m.encoder.heads} heads, ${m.parameters.toLocaleString("en")} parameters, ` +
    `vocabulary ${m.vocab_size.toLocaleString("en")}`;
  $("beam-size").value = m.decode.beam_size;
  $("alpha").value = m.decode.alpha;
  $("n-best").value = Math.min(3, m.decode.beam_size);
  return m;
}

// What the last sentence showed, gone: nothing on the page may belong to another input than the one asked.
function clearResults() {
  state.explained = null;
  state.source = "";
  state.forced = null;
  sampling.source = "";
  stepping.source = "";
  stepping.asked++;
  clearNeighbours();
  $("step-stages").replaceChildren();
  $("step-positions").replaceChildren();
  sampling.asked++;  // a distribution still on its way is dropped
  for (const id of ["next-tokens", "sample-prefix"]) $(id).replaceChildren();
  $("sample-text").textContent = "";
  $("translation").textContent = "";
  $("n-best-list").replaceChildren();
  $("forced").replaceChildren();
  $("forced-info").textContent = "";
  for (const [id, what] of [["attention", "attention"], ["beam-tree", "search"]]) {
    const box = $(id);
    box.replaceChildren();
    el("p", {class: "empty"}, box, `Translate a sentence to see its ${what}.`);
  }
}

async function translate() {
  const lines = $("source").value.split("\n");
  const beam = Number($("beam-size").value), nBest = Number($("n-best").value);
  const model = state.model;  // a reply that comes back after the picker moved on is dropped
  clearResults();
  setStatus("translating…");
  try {
    const reply = await api("/api/translate",
      {lines, beam_size: beam, n_best: nBest, alpha: Number($("alpha").value), model: model.name});
    if (state.model !== model) return;
    $("translation").textContent = reply.translations.join("\n");
    const list = $("n-best-list");
    list.replaceChildren();
    const hyps = reply.n_best ? reply.n_best[firstLine(lines)] : [];
    for (const h of hyps) el("li", {}, list, `${h.text}  (${h.score.toFixed(3)})`);
    setStatus("");
    state.source = lines[firstLine(lines)];
    state.forced = null;
    await explain();
  } catch (err) {
    if (state.model === model) setStatus(err.message, true);
  }
}

function firstLine(lines) {
  const i = lines.findIndex((l) => l.trim());
  return i < 0 ? 0 : i;
}

async function explain() {
  if (!state.source.trim()) return;
  const model = state.model, source = state.source;  // a reply for another sentence or model is dropped
  const body = {source: state.source, beam_size: Number($("beam-size").value), alpha: Number($("alpha").value),
    model: model.name};
  if (state.forced) body.target_ids = state.forced;
  let explained;
  try {
    explained = await api("/api/explain", body);
  } catch (err) {
    if (state.model === model) setStatus(err.message, true);
    return;
  }
  if (state.model !== model || state.source !== source) return;
  state.explained = explained;
  if (!state.forced) {
    showSampling(state.source, explained.target_tokens);
    showStepThrough(state.source, explained.translation);
    showNeighbours(state.source, explained.source_tokens);
  }
  fillLayerHeadSelects();
  drawAttention();
  drawTree();
  drawForced();
}

// --- attention -----------------------------------------------------------------------------------

function attentionTokens(kind) {
  const e = state.explained;
  if (kind === "encoder") return [e.source_tokens, e.source_tokens];
  if (kind === "decoder") return [e.target_tokens, e.target_in_tokens];
  return [e.target_tokens, e.source_tokens];
}

function fillLayerHeadSelects() {
  const kind = $("attention-kind").value;
  const layers = state.explained.attention[kind];
  for (const [id, n] of [["attention-layer", layers.length], ["attention-head", layers[0].length]]) {
    const select = $(id), keep = Math.min(Number(select.value) || 0, n - 1);
    select.replaceChildren();
    for (let i = 0; i < n; i++) el("option", {value: i}, select, String(i + 1));
    select.value = keep;
  }
}

function drawAttention() {
  if (!state.explained) return;
  const kind = $("attention-kind").value, box = $("attention");
  box.replaceChildren();
  box.dataset.kind = kind;
  const view = $("attention-view").value, layer = Number($("attention-layer").value);
  if (view === "grid") drawGrid(box, kind);
  else if (view === "layer") drawLayerHeads(box, kind, layer);
  else drawHead(box, kind, layer, Number($("attention-head").value));
}

// BertViz's head view: queries on the left, keys on the right, a line of opacity w for each weight.
function drawHead(box, kind, layer, head) {
  const weights = state.explained.attention[kind][layer][head];
  const [queries, keys] = attentionTokens(kind);
  const row = 20, width = 420, left = 140, right = width - 140;
  const svg = svgEl("svg", {width, height: row * Math.max(queries.length, keys.length) + 10,
    "data-testid": "attention-head-view", "data-layer": layer, "data-head": head}, box);
  const lines = svgEl("g", {class: "links"}, svg);
  weights.forEach((rowWeights, q) => rowWeights.forEach((w, k) => {
    if (w < 0.01) return;
    svgEl("line", {x1: left + 4, y1: q * row + 14, x2: right - 4, y2: k * row + 14, "stroke-opacity": w,
      "stroke-width": 1 + 3 * w, "data-q": q, "data-k": k, "data-w": w, class: "link"}, lines);
  }));
  const label = (text, x, y, anchor, side, i) => {
    const t = svgEl("text", {x, y, "text-anchor": anchor, class: "token", "data-side": side, "data-index": i, tabindex: 0,
      "aria-label": `${side === "q" ? "query" : "key"} ${i + 1}, ${text}: show its links`}, svg, showPiece(text));
    for (const on of ["mouseenter", "focus"]) t.addEventListener(on, () => highlight(svg, side, i));
    for (const off of ["mouseleave", "blur"]) t.addEventListener(off, () => highlight(svg, null, null));
  };
  queries.forEach((t, i) => label(t, left - 8, i * row + 18, "end", "q", i));
  keys.forEach((t, i) => label(t, right + 8, i * row + 18, "start", "k", i));
}

// BertViz's head view: every head of one layer at once, a colour each; a head's button shows it alone.
function drawLayerHeads(box, kind, layer) {
  const heads = state.explained.attention[kind][layer], [queries, keys] = attentionTokens(kind);
  const colour = (h) => `hsl(${Math.round(360 * h / heads.length)}, 70%, 45%)`;
  const legend = el("div", {class: "controls", role: "group", "aria-label": "heads"}, box);
  const row = 20, width = 420, left = 140, right = width - 140;
  const svg = svgEl("svg", {width, height: row * Math.max(queries.length, keys.length) + 10,
    "data-testid": "head-view", "data-layer": layer}, box);
  const lines = svgEl("g", {class: "links"}, svg);
  heads.forEach((weights, head) => weights.forEach((rowWeights, q) => rowWeights.forEach((w, k) => {
    if (w < 0.01) return;
    const dy = (head - heads.length / 2) * 0.6;  // a small offset per head, so that equal lines stay apart
    svgEl("line", {x1: left + 4, y1: q * row + 14 + dy, x2: right - 4, y2: k * row + 14 + dy, stroke: colour(head),
      "stroke-opacity": w, "stroke-width": 1 + 2 * w, "data-head": head, "data-q": q, "data-k": k, "data-w": w,
      class: "head-link"}, lines);
  })));
  queries.forEach((t, i) => svgEl("text", {x: left - 8, y: i * row + 18, "text-anchor": "end", class: "token"}, svg, showPiece(t)));
  keys.forEach((t, i) => svgEl("text", {x: right + 8, y: i * row + 18, "text-anchor": "start", class: "token"}, svg, showPiece(t)));
  let alone = null;
  heads.forEach((_, head) => {
    const b = el("button", {class: "alt head-key", "aria-pressed": "false", "data-testid": "head-key", "data-head": head},
      legend, `head ${head + 1}`);
    b.style.borderColor = b.style.color = colour(head);
    b.addEventListener("click", () => {
      alone = alone === head ? null : head;
      for (const key of legend.querySelectorAll("button")) key.setAttribute("aria-pressed", String(Number(key.dataset.head) === alone));
      for (const line of lines.children) line.classList.toggle("hidden", alone !== null && Number(line.dataset.head) !== alone);
    });
  });
}

function highlight(svg, side, index) {
  for (const line of svg.querySelectorAll("line.link")) {
    const on = side === null || line.dataset[side] === String(index);
    line.classList.toggle("dim", !on);
    line.classList.toggle("lit", side !== null && on);
  }
  for (const t of svg.querySelectorAll("text.token")) {
    t.classList.toggle("lit", side !== null && t.dataset.side === side && t.dataset.index === String(index));
  }
}

// BertViz's model view: one small heat map per layer (rows) and head (columns); click to open one.
function drawGrid(box, kind) {
  const layers = state.explained.attention[kind];
  const grid = el("div", {class: "grid", "data-testid": "attention-grid"}, box);
  grid.style.gridTemplateColumns = `repeat(${layers[0].length}, auto)`;
  layers.forEach((heads, layer) => heads.forEach((weights, head) => {
    const cell = el("canvas", {class: "cell", "data-testid": "attention-cell", "data-layer": layer, "data-head": head,
      title: `layer ${layer + 1}, head ${head + 1}`, tabindex: 0, role: "button",
      "aria-label": `open layer ${layer + 1}, head ${head + 1}`}, grid);
    const size = 4, rows = weights.length, cols = weights[0].length;
    cell.width = cols * size;
    cell.height = rows * size;
    const ctx = cell.getContext("2d");
    weights.forEach((r, q) => r.forEach((w, k) => {
      ctx.fillStyle = weightColour(w);
      ctx.fillRect(k * size, q * size, size, size);
    }));
    const open = () => {
      $("attention-layer").value = layer;
      $("attention-head").value = head;
      $("attention-view").value = "head";
      drawAttention();
    };
    cell.addEventListener("click", open);
    cell.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") { event.preventDefault(); open(); }
    });
  }));
}

// --- the beam-search tree ------------------------------------------------------------------------

function drawTree() {
  const tree = state.explained.tree, box = $("beam-tree");
  box.replaceChildren();
  const nodes = tree.nodes, pos = new Map([[0, {x: 10, y: 20}]]);
  const colWidth = 96, rowHeight = 32;
  tree.steps.forEach((ids, s) => ids.forEach((id, r) => pos.set(id, {x: 10 + (s + 1) * colWidth, y: 20 + r * rowHeight})));
  const width = 80 + colWidth * tree.steps.length, height = 16 + rowHeight * Math.max(1, ...tree.steps.map((ids) => ids.length));
  const svg = svgEl("svg", {viewBox: `0 0 ${width} ${height}`, "data-width": width, "data-height": height}, box);
  const best = bestPath(nodes);
  for (const node of nodes.slice(1)) {
    const a = pos.get(node.parent), b = pos.get(node.id);
    svgEl("line", {x1: a.x + 62, y1: a.y + 2, x2: b.x - 2, y2: b.y + 2, class: best.has(node.id) ? "edge best" : "edge"}, svg);
  }
  for (const node of nodes) {
    const p = pos.get(node.id), start = node.parent === null;
    const score = node.finished ? `= ${node.score.toFixed(2)}` : node.log_prob.toFixed(2);
    const about = `${pieceName(node.piece)}, log P ${node.log_prob.toFixed(3)}` +
      (node.finished ? `, finished, score ${node.score.toFixed(3)}` : "") + (node.forced ? ", forced" : "");
    const g = svgEl("g", {class: nodeClass(node, best), "data-testid": "tree-node", "data-node": node.id,
      "data-token": node.token, "data-best": best.has(node.id)}, svg);
    if (!start) Object.assign(g.dataset, {logProb: node.log_prob, ...(node.finished ? {score: node.score} : {})});
    svgEl("rect", {x: p.x - 2, y: p.y - 12, width: 64, height: 28, rx: 3}, g);
    svgEl("text", {x: p.x + 2, y: p.y + 1}, g, start ? "<s>" : showPiece(node.piece).slice(0, 9));
    svgEl("text", {x: p.x + 2, y: p.y + 12, class: "score"}, g, start ? "" : score);
    svgEl("title", {}, g, start ? "<s>, where every hypothesis starts" : about);
    if (start) continue;
    g.setAttribute("tabindex", "0");
    g.setAttribute("role", "button");
    g.setAttribute("aria-label", `force ${about}`);
    const go = () => force(pathTo(nodes, node.id));
    g.addEventListener("click", () => { if (!state.panned) go(); });
    g.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") { event.preventDefault(); go(); }
    });
  }
  zoomTree(state.treeZoom);
}

// The tree's scale: a number (1 = its natural size), or null to fit the box's width (never below half size, where
// the pieces stop being legible; the box scrolls, and a drag pans it).
function zoomTree(zoom) {
  const box = $("beam-tree"), svg = box.querySelector("svg");
  state.treeZoom = zoom;
  if (!svg) return;
  const width = Number(svg.dataset.width), height = Number(svg.dataset.height);
  const scale = zoom ?? Math.max(0.5, Math.min(1, (box.clientWidth - 4) / width));
  svg.setAttribute("width", Math.round(width * scale));
  svg.setAttribute("height", Math.round(height * scale));
  box.dataset.scale = scale.toFixed(3);
  $("tree-zoom-value").textContent = `${Math.round(100 * scale)}%`;
}

function startTreeControls() {
  const box = $("beam-tree");
  const scale = () => Number(box.dataset.scale || 1);
  $("tree-zoom-in").addEventListener("click", () => zoomTree(Math.min(2, scale() * 1.25)));
  $("tree-zoom-out").addEventListener("click", () => zoomTree(Math.max(0.2, scale() / 1.25)));
  $("tree-fit").addEventListener("click", () => zoomTree(null));
  let drag = null;  // a drag pans the box; one that moved is not a click on a node
  box.addEventListener("pointerdown", (event) => {
    drag = {x: event.clientX, y: event.clientY, left: box.scrollLeft, top: box.scrollTop};
    state.panned = false;
  });
  box.addEventListener("pointermove", (event) => {
    if (!drag) return;
    const dx = event.clientX - drag.x, dy = event.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 4) state.panned = true;
    box.scrollLeft = drag.left - dx;
    box.scrollTop = drag.top - dy;
  });
  for (const end of ["pointerup", "pointerleave"]) box.addEventListener(end, () => { drag = null; });
}

function nodeClass(node, best) {
  return ["node", best.has(node.id) ? "best" : "", node.finished ? "finished" : "", node.forced ? "forced" : ""].join(" ");
}

// The ids of the best finished node and its ancestors.
function bestPath(nodes) {
  let bestId = null;
  for (const n of nodes) if (n.finished && (bestId === null || n.score > nodes[bestId].score)) bestId = n.id;
  const ids = new Set();
  for (let id = bestId; id !== null && id !== undefined; id = nodes[id].parent) ids.add(id);
  return ids;
}

function pathTo(nodes, id) {
  const tokens = [];
  for (; nodes[id].parent !== null; id = nodes[id].parent) tokens.push(nodes[id].token);
  return tokens.reverse();
}

async function force(tokens) {
  state.forced = tokens;
  await explain();
}

function drawForced() {
  const box = $("forced"), e = state.explained;
  box.replaceChildren();
  $("forced-info").textContent = e.forced ? `${e.forced} forced token(s); translation: ${e.translation}` :
    `free search; translation: ${e.translation}`;
  for (const node of e.tree.nodes.filter((n) => n.forced)) {
    const item = el("div", {class: "forced-token", "data-testid": "forced-token"}, box);
    el("b", {}, item, `${showPiece(node.piece)} ${(100 * node.token_prob).toFixed(1)}%`);
    for (const alt of node.alternatives) {
      const b = el("button", {class: "alt", "aria-label": `force ${pieceName(alt.piece)} instead, ` +
        `${(100 * alt.prob).toFixed(1)}%`}, item, `${showPiece(alt.piece)} ${(100 * alt.prob).toFixed(1)}%`);
      b.addEventListener("click", () => force([...pathTo(e.tree.nodes, node.parent), alt.token]));
    }
  }
}

window.addEventListener("DOMContentLoaded", async () => {
  $("translate").addEventListener("click", translate);
  startSampling();
  startStepThrough();
  startNeighbours();
  $("reset-forced").addEventListener("click", () => force(null));
  startTreeControls();
  $("attention-kind").addEventListener("change", () => { fillLayerHeadSelects(); drawAttention(); });
  for (const id of ["attention-view", "attention-layer", "attention-head"]) $(id).addEventListener("change", drawAttention);
  let models;
  try {
    models = await loadModels();
  } catch (err) {  // a model that could not load: the page says which, and why
    $("model-info").textContent = "";
    setStatus(err.message, true);
    return;
  }
  fillModelPicker(models);
  await startFigures(showModel(models[0]));
  document.body.dataset.ready = "true";
});
