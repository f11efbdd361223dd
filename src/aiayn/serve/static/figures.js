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
  readout.textContent = "Hover the matrix, or focus it and use the arrow keys.";  // nothing of another model's
  document.getElementById("pe-wave-readout").textContent = "Hover the waves.";
  const cw = Math.max(1, Math.floor(640 / f.d_model)), ch = 6;
  canvas.width = f.d_model * cw;
  canvas.height = f.length * ch;
  canvas.setAttribute("aria-label", `positional encoding: ${f.length} positions by ${f.d_model} dimensions; the arrow ` +
    "keys move through it");
  Object.assign(canvas.dataset, {cellWidth: cw, cellHeight: ch, dModel: f.d_model, length: f.length, layout: f.layout});
  const ctx = canvas.getContext("2d");
  f.values.forEach((row, pos) => row.forEach((v, dim) => {
    ctx.fillStyle = signedColour(v);
    ctx.fillRect(dim * cw, pos * ch, cw, ch);
  }));
  peAxes(f, cw, ch);
  const layout = f.layout === "interleaved" ? "the paper's interleaved layout: sin at even dims, cos at odd" :
    "Marian's halves: all sines first, then all cosines";
  document.getElementById("pe-note").textContent = `PE of the served model: d_model ${f.d_model}, positions 0–` +
    `${f.length - 1} (rows) by dimension (columns), ${layout}. Blue positive, red negative.` +
    (f.positions === "learned" ? " (This model learns its positions; these are the sinusoids it would use.)" : "");
  let at = {pos: 0, dim: 0};
  const show = (pos, dim) => {
    if (pos < 0 || pos >= f.length || dim < 0 || dim >= f.d_model) return;
    at = {pos, dim};
    const value = f.values[pos][dim];
    Object.assign(readout.dataset, {pos, dim, value});
    readout.textContent = `pos ${pos}, dim ${dim}, value ${value.toFixed(4)}`;
  };
  canvas.addEventListener("mousemove", (event) => {
    const box = canvas.getBoundingClientRect();
    show(Math.floor((event.clientY - box.top) * canvas.height / box.height / ch),
      Math.floor((event.clientX - box.left) * canvas.width / box.width / cw));
  });
  canvas.setAttribute("tabindex", "0");  // the arrow keys walk the matrix
  canvas.addEventListener("keydown", (event) => {
    const move = {ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1]}[event.key];
    if (!move) return;
    event.preventDefault();
    show(at.pos + move[0], at.dim + move[1]);
  });
  const dims = document.getElementById("pe-dims"), fresh = dims.cloneNode(true);
  dims.replaceWith(fresh);
  fresh.addEventListener("change", () => drawWaves(f));
  drawWaves(f);
}

// Tick labels beside the heat map: positions down the side, dimensions along the bottom.
function peAxes(f, cw, ch) {
  for (const [id, n, step, size, style] of [["pe-y-axis", f.length, 10, ch, "top"], ["pe-x-axis", f.d_model,
    Math.max(1, Math.ceil(f.d_model / 8)), cw, "left"]]) {
    const axis = document.getElementById(id);
    axis.replaceChildren();
    axis.style[style === "top" ? "height" : "width"] = `${n * size}px`;
    for (let i = 0; i < n; i += step) el("span", {class: "tick"}, axis, String(i)).style[style] = `${i * size}px`;
  }
}

// The wave view: PE(pos, i) over the positions for each chosen dimension i, one curve each (the sinusoids of §3.5,
// whose wavelengths grow from 2π to 10000·2π along the dimensions).
function drawWaves(f) {
  const box = document.getElementById("pe-waves"), readout = document.getElementById("pe-wave-readout");
  const asked = document.getElementById("pe-dims").value.split(/[\s,]+/).filter(Boolean).map(Number);
  const dims = [...new Set(asked.filter((d) => Number.isInteger(d) && d >= 0 && d < f.d_model))].slice(0, 8);
  box.replaceChildren();
  box.dataset.dims = JSON.stringify(dims);
  readout.textContent = asked.length && dims.length < new Set(asked).size ?
    `Dimensions are whole numbers from 0 to ${f.d_model - 1}, at most 8.` : "Hover the waves.";
  const W = 640, H = 220, m = {l: 40, r: 10, t: 10, b: 30};
  const X = (pos) => m.l + pos / Math.max(1, f.length - 1) * (W - m.l - m.r);
  const Y = (v) => m.t + (1 - v) / 2 * (H - m.t - m.b);
  const svg = svgEl("svg", {width: W, height: H, role: "img", "aria-label": `PE over positions for dimensions ${dims.join(", ")}`}, box);
  for (const v of [-1, 0, 1]) {
    svgEl("line", {x1: m.l, x2: W - m.r, y1: Y(v), y2: Y(v), class: "gridline"}, svg);
    svgEl("text", {x: m.l - 6, y: Y(v) + 4, "text-anchor": "end", class: "axis"}, svg, String(v));
  }
  for (let pos = 0; pos < f.length; pos += 10) {
    svgEl("text", {x: X(pos), y: H - m.b + 16, "text-anchor": "middle", class: "axis"}, svg, String(pos));
  }
  svgEl("text", {x: W / 2, y: H - 2, "text-anchor": "middle", class: "axis"}, svg, "position");
  const colour = (j) => `hsl(${Math.round(360 * j / Math.max(1, dims.length))}, 70%, 42%)`;
  const legend = el("p", {class: "legend"}, box);
  dims.forEach((dim, j) => {
    const values = f.values.map((row) => row[dim]);
    const path = values.map((v, pos) => `${pos ? "L" : "M"}${X(pos).toFixed(1)},${Y(v).toFixed(1)}`).join("");
    const line = svgEl("path", {d: path, fill: "none", stroke: colour(j), "stroke-width": 2, "data-testid": "pe-wave",
      "data-dim": dim}, svg);
    svgEl("title", {}, line, `dimension ${dim}`);
    el("span", {class: "wave-key"}, legend, `dim ${dim}`).style.color = colour(j);
  });
  const cursor = svgEl("line", {y1: m.t, y2: H - m.b, class: "cursor", visibility: "hidden"}, svg);
  svg.addEventListener("mousemove", (event) => {
    const r = svg.getBoundingClientRect();
    const pos = Math.round(((event.clientX - r.left) * W / r.width - m.l) / (W - m.l - m.r) * (f.length - 1));
    if (pos < 0 || pos >= f.length || !dims.length) return;
    cursor.setAttribute("x1", X(pos));
    cursor.setAttribute("x2", X(pos));
    cursor.setAttribute("visibility", "visible");
    readout.dataset.pos = pos;
    readout.textContent = `pos ${pos}: ` + dims.map((d) => `dim ${d} ${f.values[pos][d].toFixed(4)}`).join(", ");
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
  const readout = el("p", {class: "readout", "data-testid": "bleu-readout", "aria-live": "polite"}, null,
    "Hover or focus a point to name it.");
  const hover = svgEl("text", {class: "label hover-label", visibility: "hidden", "data-testid": "bleu-hover-label"});
  for (const p of points) {
    const about = `${p.name} (${p.series}): BLEU ${p.bleu}, ${p.flops.toExponential(1)} FLOPs`;
    const g = svgEl("g", {class: `point ${p.series}`, tabindex: 0, role: "img", "aria-label": about}, svg);
    svgEl("circle", {cx: X(p.flops), cy: Y(p.bleu), r: p.series === "run" ? 6 : 5, "data-testid": "bleu-point",
      "data-model": p.name, "data-series": p.series, "data-flops": p.flops, "data-bleu": p.bleu}, g);
    svgEl("title", {}, g, about);
    if (p.name.startsWith("Transformer")) {
      svgEl("text", {x: X(p.flops) + 8, y: Y(p.bleu) + 4, class: "label"}, g, `${p.name.replace("Transformer ", "")} ${p.series}`);
    }
    const show = () => {
      const right = X(p.flops) > W * 0.6;  // the label goes left of points near the right edge
      Object.assign(hover.dataset, {model: p.name, series: p.series});
      hover.setAttribute("x", X(p.flops) + (right ? -10 : 10));
      hover.setAttribute("y", Y(p.bleu) - 10);
      hover.setAttribute("text-anchor", right ? "end" : "start");
      hover.setAttribute("visibility", "visible");
      hover.textContent = `${p.name} (${p.series}): ${p.bleu}`;
      readout.textContent = about;
    };
    g.addEventListener("mouseenter", show);
    g.addEventListener("focus", show);
    for (const off of ["mouseleave", "blur"]) g.addEventListener(off, () => hover.setAttribute("visibility", "hidden"));
  }
  svg.appendChild(hover);  // drawn last: above every point
  box.appendChild(readout);
  const legend = el("p", {class: "legend"}, box);
  legend.innerHTML = '<span class="key en-de"></span> Table 2, EN-DE <span class="key en-fr"></span> Table 2, EN-FR ' +
    `<span class="key run"></span> runs beside this model (${f.runs.length})`;
  if (f.skipped.length) el("p", {class: "note"}, box, "Not shown: " + f.skipped.map((s) => `${s.run} (${s.why})`).join("; "));
}
