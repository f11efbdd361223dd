// One token step by step: each stage of §3 for a chosen position and layer (POST /api/step), vectors as heat
// strips, each head's score row before and after the scaling and its softmax, the residual stream's norm.
"use strict";

const stepping = {source: "", target: "", position: 0, asked: 0};

function startStepThrough() {
  $("step-side").addEventListener("change", () => {
    stepping.position = 0;
    fillStepLayers(state.model);
    drawStep();
  });
  $("step-layer").addEventListener("change", drawStep);
}

// A new translation (or another model): its first line and best translation are followed from position 0.
function showStepThrough(source, target) {
  Object.assign(stepping, {source, target, position: 0});
  fillStepLayers(state.model);
  drawStep();
}

function fillStepLayers(model) {
  const select = $("step-layer"), side = $("step-side").value;
  const layers = side === "source" ? model.encoder.layers : model.decoder.layers, keep = select.value;
  select.replaceChildren();
  for (let i = 0; i < layers; i++) el("option", {value: i}, select, String(i + 1));
  select.value = keep && Number(keep) < layers ? keep : "0";
}

async function drawStep() {
  if (!stepping.source) return;
  const model = state.model, asked = ++stepping.asked;
  const body = {source: stepping.source, target: stepping.target, side: $("step-side").value,
    position: stepping.position, layer: Number($("step-layer").value), model: model.name};
  let s;
  try {
    s = await api("/api/step", body);
  } catch (err) {
    setStatus(err.message, true);
    return;
  }
  if (asked !== stepping.asked || state.model !== model) return;
  drawStepPositions(s);
  const box = $("step-stages");
  box.replaceChildren();
  box.dataset.side = s.side;
  box.dataset.position = s.position;
  box.dataset.layer = s.layer;
  stage(box, "embedding", "token embedding × √d_model (§3.4)", s.embedding);
  stage(box, "positional_encoding", "positional encoding (§3.5)", s.positional_encoding);
  stage(box, "input", "their sum: what the first layer reads", s.input);
  attentionStages(box, "self_attention", s.side === "source" ? "self-attention" : "masked self-attention", s.self_attention);
  stage(box, "self_attention_norm", "LayerNorm(x + attention) (§3.1)", s.self_attention_norm);
  if (s.cross_attention) {
    attentionStages(box, "cross_attention", "encoder-decoder attention", s.cross_attention);
    stage(box, "cross_attention_norm", "LayerNorm(x + attention)", s.cross_attention_norm);
  }
  stage(box, "ffn", "FFN(x) = max(0, xW₁ + b₁)W₂ + b₂ (§3.3)", s.ffn);
  stage(box, "output", `LayerNorm(x + FFN(x)): layer ${s.layer + 1}'s output`, s.output);
  const norms = el("p", {class: "note", "data-testid": "step-norms"}, box);
  norms.textContent = "Residual stream's norm after each sub-layer, layer by layer: " + s.residual_norms.map(
    (n, i) => `${i + 1}: ` + Object.values(n).map((v) => v.toFixed(2)).join(" → ")).join("; ");
  if (s.logits) {
    const top = el("div", {class: "bars", "data-testid": "step-logits"}, box);
    el("h3", {}, top, "logits → softmax: the next token (§3.4)");
    s.logits.ids.forEach((id, i) => {
      const row = el("div", {class: "bar-row"}, top);
      el("span", {class: "bar-label"}, row, `${id} (logit ${s.logits.logits[i].toFixed(2)})`);
      el("span", {class: "bar"}, row).style.width = `${(100 * s.logits.probs[i]).toFixed(2)}%`;
      el("span", {class: "bar-value"}, row, `${(100 * s.logits.probs[i]).toFixed(2)}%`);
    });
  }
}

function drawStepPositions(s) {
  const box = $("step-positions"), tokens = s.side === "source" ? s.source_tokens : s.target_in_tokens;
  box.replaceChildren();
  tokens.forEach((t, i) => {
    const b = el("button", {class: "alt", "aria-pressed": String(i === s.position),
      "aria-label": `position ${i + 1}: ${pieceName(t)}`, "data-testid": "step-position"}, box, showPiece(t));
    b.addEventListener("click", () => { stepping.position = i; drawStep(); });
  });
}

// A vector as a strip of cells (blue positive, red negative, scaled by its largest magnitude), its values kept.
function stage(box, name, label, values) {
  const row = el("div", {class: "stage", "data-testid": "step-stage", "data-stage": name}, box);
  el("span", {class: "stage-label"}, row, label);
  strip(row, values);
  return row;
}

function strip(parent, values) {
  const canvas = el("canvas", {class: "strip", width: values.length, height: 1, role: "img",
    "aria-label": `${values.length} values`}, parent);
  canvas.dataset.values = JSON.stringify(values);
  const ctx = canvas.getContext("2d"), top = Math.max(...values.map(Math.abs)) || 1;
  values.forEach((v, i) => { ctx.fillStyle = signedColour(v / top); ctx.fillRect(i, 0, 1, 1); });
}

function attentionStages(box, name, label, a) {
  const part = el("div", {class: "stage attention-stages", "data-testid": "step-stage", "data-stage": name}, box);
  el("h3", {}, part, `${label}: each head's query, scores q·k, ÷ √d_k, softmax (§3.2.1)`);
  a.weights.forEach((weights, h) => {
    const row = el("div", {class: "head-stage", "data-testid": "step-head"}, part);
    el("span", {class: "head-label"}, row, `head ${h + 1}`);
    strip(row, a.query[h]);
    const cells = el("span", {class: "score-row"}, row);
    weights.forEach((w, k) => {
      const c = el("button", {class: "tok score-cell", "data-testid": "step-score", "data-head": h, "data-key": k,
        "aria-label": `head ${h + 1}, key ${k + 1}: weight ${w.toFixed(3)}`, title: `score ${a.scores[h][k].toFixed(3)}, scaled ` +
        `${a.scaled[h][k].toFixed(3)}, softmax unscaled ${a.unscaled_softmax[h][k].toFixed(3)}, scaled ${w.toFixed(3)}`},
      cells, a.masked[k] ? "·" : w.toFixed(2));
      c.style.background = weightColour(w);
      c.addEventListener("click", () => drawNeuron(neuron, a, h, k));
    });
  });
  const neuron = el("div", {class: "neuron", "data-testid": "neuron-view"}, part);
  el("p", {class: "hint"}, neuron, "Click a weight to see its query and key element by element.");
  const concat = el("div", {class: "stage-sub"}, part);
  el("span", {class: "stage-label"}, concat, "the heads' weighted sums, concatenated");
  strip(concat, a.concat);
  const out = el("div", {class: "stage-sub"}, part);
  el("span", {class: "stage-label"}, out, "× W^O (§3.2.2)");
  strip(out, a.output);
}

// BertViz's neuron view: for one head's query and one key, q, k, their element-wise product, and its sum, the score,
// before and after the division by √d_k.
function drawNeuron(box, a, head, key) {
  const q = a.query[head], k = a.keys[head][key], product = q.map((x, i) => x * k[i]);
  box.replaceChildren();
  Object.assign(box.dataset, {head, key});
  for (const [name, label, values] of [["q", `q (head ${head + 1})`, q], ["k", `k (key ${key + 1})`, k],
    ["product", "q ∘ k, element by element", product]]) {
    const row = el("div", {class: "stage-sub", "data-part": name}, box);
    el("span", {class: "stage-label"}, row, label);
    strip(row, values);
  }
  const sum = product.reduce((x, y) => x + y, 0);
  el("p", {class: "note", "data-testid": "neuron-score"}, box, `Σ q∘k = ${sum.toFixed(4)} (the score ` +
    `${a.scores[head][key].toFixed(4)}); ÷ √d_k = ${a.scaled[head][key].toFixed(4)}; softmax weight ` +
    `${a.weights[head][key].toFixed(4)} (unscaled ${a.unscaled_softmax[head][key].toFixed(4)})`);
}
