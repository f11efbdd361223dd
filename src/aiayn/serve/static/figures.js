// The paper's figures, live. Every number comes from the server (/api/figures/..., computed by
// aiayn.lab, the functions the paper lab plots with); this file only draws them.
"use strict";

const IT_SENTENCE = "The animal didn't cross the street because it was too tired.";

async function startFigures(model) {
  for (const id of ["softmax-dk", "softmax-scale", "softmax-toggle"]) {
    document.getElementById(id).addEventListener("input", drawSoftmax);
  }
  await Promise.all([drawSoftmax(), modelFigures(model)]);
}

// The figures of one served model: drawn again when the page switches models.
async function modelFigures(model) {
  await Promise.all([drawPositions(model), drawCost(model), startHeads(model)]);
}

// --- softmax scaling (§3.2.1) --------------------------------------------------------------------

let softmaxAsked = 0;

async function drawSoftmax() {
  const dk = Number(document.getElementById("softmax-dk").value);
  const scale = Number(document.getElementById("softmax-scale").value);
  const scaled = document.getElementById("softmax-toggle").checked;
  document.getElementById("softmax-dk-value").textContent = dk;
  document.getElementById("softmax-scale-value").textContent = scale.toFixed(1);
  const asked = ++softmaxAsked;
  const f = await api(`/api/figures/softmax?d_k=${dk}&raw_scale=${scale}&scaled=${scaled}`);
  if (asked !== softmaxAsked) return;  // a newer slider position is on its way
  const box = document.getElementById("softmax-weights");
  box.replaceChildren();
  box.dataset.weights = JSON.stringify(f.weights);
  box.dataset.scores = JSON.stringify(f.scores);
  box.dataset.dk = f.d_k;
  box.dataset.scale = f.raw_scale;
  box.dataset.scaled = f.scaled;
  const names = ["high match", "medium match", "low match"];
  f.weights.forEach((w, i) => {
    const row = el("div", {class: "bar-row"}, box);
    el("span", {class: "bar-label"}, row, `token ${i + 1} (${names[i]}), score ${f.scores[i].toFixed(2)}`);
    const bar = el("span", {class: "bar"}, row);
    bar.style.width = `${(100 * w).toFixed(2)}%`;
    el("span", {class: "bar-value", "data-testid": "softmax-weight"}, row, `${(100 * w).toFixed(2)}%`);
  });
  document.getElementById("softmax-jacobian").textContent =
    `gradient size ‖diag(p) − ppᵀ‖ = ${f.jacobian_norm.toFixed(4)}` +
    (f.scaled ? "" : " (unscaled: watch it vanish as d_k grows)");
}

// --- multi-head view of "it" (§3.2.2) ------------------------------------------------------------

async function startHeads(model) {
  const note = document.getElementById("heads-note"), old = document.getElementById("heads-layer");
  const select = old.cloneNode(false);  // no options, no listeners of the model shown before
  old.replaceWith(select);
  note.textContent = note.dataset.text || (note.dataset.text = note.textContent);
  document.getElementById("heads").replaceChildren();
  if (!(model.source_lang || "").toLowerCase().startsWith("en")) {
    note.textContent += model.source_lang ? ` This model's source is ${model.source_lang}, not English: no view.` :
      " The model directory does not record its source language (start the server with --source-lang en).";
    return;
  }
  const layers = model.encoder.layers;
  for (let i = 0; i < layers; i++) el("option", {value: i}, select, String(i + 1));
  select.value = Math.max(0, layers - 2);
  const e = await api("/api/explain", {source: IT_SENTENCE, beam_size: 1, model: model.name});
  if (state.model !== model) return;  // the picker moved on meanwhile
  const draw = () => drawHeads(e, Number(select.value));
  select.addEventListener("change", draw);
  draw();
}

function drawHeads(e, layer) {
  const box = document.getElementById("heads"), tokens = e.source_tokens;
  box.replaceChildren();
  let it = tokens.findIndex((t) => t.replace(/\u2581/g, "").toLowerCase() === "it");
  if (it < 0) it = tokens.findIndex((t) => t.toLowerCase().includes("it"));
  box.dataset.layer = layer;
  box.dataset.query = it;
  e.attention.encoder[layer].forEach((weights, head) => {
    const row = el("div", {class: "head-row", "data-testid": "head-row"}, box);
    el("span", {class: "head-label"}, row, `head ${head + 1}`);
    const strongest = weights[it].indexOf(Math.max(...weights[it]));
    weights[it].forEach((w, k) => {
      const t = el("span", {class: k === it ? "tok query" : "tok", title: w.toFixed(3)}, row, showPiece(tokens[k]));
      t.style.background = weightColour(w);
      if (k === strongest) t.classList.add("strongest");
    });
  });
}

// --- positional encoding (§3.5) ------------------------------------------------------------------

async function drawPositions(model) {
  const f = await api(`/api/figures/positions?length=${Math.min(50, model.config.max_len)}&model=${encodeURIComponent(model.name)}`);
  if (state.model !== model) return;
  const old = document.getElementById("pe-heatmap"), canvas = old.cloneNode(false);  // no listener of another model
  old.replaceWith(canvas);
  const readout = document.getElementById("pe-readout");
  const cw = Math.max(1, Math.floor(640 / f.d_model)), ch = 6;
  canvas.width = f.d_model * cw;
  canvas.height = f.length * ch;
  Object.assign(canvas.dataset, {cellWidth: cw, cellHeight: ch, dModel: f.d_model, length: f.length, layout: f.layout});
  const ctx = canvas.getContext("2d");
  f.values.forEach((row, pos) => row.forEach((v, dim) => {
    ctx.fillStyle = signedColour(v);
    ctx.fillRect(dim * cw, pos * ch, cw, ch);
  }));
  const layout = f.layout === "interleaved" ? "the paper's interleaved layout: sin at even dims, cos at odd" :
    "Marian's halves: all sines first, then all cosines";
  document.getElementById("pe-note").textContent = `PE of the served model: d_model ${f.d_model}, positions 0–` +
    `${f.length - 1} (rows) by dimension (columns), ${layout}. Blue positive, red negative.` +
    (f.positions === "learned" ? " (This model learns its positions; these are the sinusoids it would use.)" : "");
  canvas.addEventListener("mousemove", (event) => {
    const box = canvas.getBoundingClientRect();
    const dim = Math.floor((event.clientX - box.left) * canvas.width / box.width / cw);
    const pos = Math.floor((event.clientY - box.top) * canvas.height / box.height / ch);
    if (pos < 0 || pos >= f.length || dim < 0 || dim >= f.d_model) return;
    const value = f.values[pos][dim];
    Object.assign(readout.dataset, {pos, dim, value});
    readout.textContent = `pos ${pos}, dim ${dim}, value ${value.toFixed(4)}`;
  });
}

// --- BLEU against training FLOPs (Table 2) -------------------------------------------------------

async function drawCost(model) {
  const f = await api(`/api/figures/cost?model=${encodeURIComponent(model.name)}`);
  if (state.model !== model) return;
  const box = document.getElementById("bleu-flops");
  box.replaceChildren();
  const points = [];
  for (const r of f.table2) {
    if (r.flops_en_de !== null && r.bleu_en_de !== null) points.push({name: r.model, series: "en-de", flops: r.flops_en_de, bleu: r.bleu_en_de});
    if (r.flops_en_fr !== null && r.bleu_en_fr !== null) points.push({name: r.model, series: "en-fr", flops: r.flops_en_fr, bleu: r.bleu_en_fr});
  }
  for (const r of f.runs) points.push({name: `${r.run} (${r.test || "its test set"})`, series: "run", flops: r.flops, bleu: r.bleu});
  const W = 640, H = 360, m = {l: 50, r: 20, t: 16, b: 40};
  const lx = points.map((p) => Math.log10(p.flops)), bs = points.map((p) => p.bleu);
  const x0 = Math.floor(Math.min(...lx)), x1 = Math.ceil(Math.max(...lx));
  const y0 = Math.floor(Math.min(...bs) / 5) * 5, y1 = Math.ceil(Math.max(...bs) / 5) * 5;
  const X = (flops) => m.l + (Math.log10(flops) - x0) / (x1 - x0 || 1) * (W - m.l - m.r);
  const Y = (bleu) => H - m.b - (bleu - y0) / (y1 - y0 || 1) * (H - m.t - m.b);
  const svg = svgEl("svg", {width: W, height: H}, box);
  for (let e = x0; e <= x1; e++) {
    svgEl("line", {x1: X(10 ** e), x2: X(10 ** e), y1: m.t, y2: H - m.b, class: "gridline"}, svg);
    svgEl("text", {x: X(10 ** e), y: H - m.b + 16, "text-anchor": "middle", class: "axis"}, svg, `1e${e}`);
  }
  for (let b = y0; b <= y1; b += 5) {
    svgEl("line", {x1: m.l, x2: W - m.r, y1: Y(b), y2: Y(b), class: "gridline"}, svg);
    svgEl("text", {x: m.l - 6, y: Y(b) + 4, "text-anchor": "end", class: "axis"}, svg, String(b));
  }
  svgEl("text", {x: W / 2, y: H - 6, "text-anchor": "middle", class: "axis"}, svg, "training FLOPs (log scale)");
  svgEl("text", {x: 12, y: H / 2, transform: `rotate(-90 12 ${H / 2})`, "text-anchor": "middle", class: "axis"}, svg, "BLEU");
  for (const p of points) {
    const g = svgEl("g", {class: `point ${p.series}`}, svg);
    svgEl("circle", {cx: X(p.flops), cy: Y(p.bleu), r: p.series === "run" ? 6 : 5, "data-testid": "bleu-point",
      "data-model": p.name, "data-series": p.series, "data-flops": p.flops, "data-bleu": p.bleu}, g);
    svgEl("title", {}, g, `${p.name} (${p.series}): BLEU ${p.bleu}, ${p.flops.toExponential(1)} FLOPs`);
    if (p.name.startsWith("Transformer")) {
      svgEl("text", {x: X(p.flops) + 8, y: Y(p.bleu) + 4, class: "label"}, g, `${p.name.replace("Transformer ", "")} ${p.series}`);
    }
  }
  const legend = el("p", {class: "legend"}, box);
  legend.innerHTML = '<span class="key en-de"></span> Table 2, EN-DE <span class="key en-fr"></span> Table 2, EN-FR ' +
    `<span class="key run"></span> runs beside this model (${f.runs.length})`;
  if (f.skipped.length) el("p", {class: "note"}, box, "Not shown: " + f.skipped.map((s) => `${s.run} (${s.why})`).join("; "));
}
