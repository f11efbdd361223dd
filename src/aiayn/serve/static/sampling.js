// The sampling view: the next token's distribution after a prefix of the translation at a temperature, its
// top-k, and a seeded continuation (POST /api/next and /api/sample; the numbers are the server's).
"use strict";

const sampling = {source: "", pieces: [], position: 0, asked: 0};

function startSampling() {
  for (const id of ["sample-temperature", "sample-top-k"]) $(id).addEventListener("input", drawNext);
  $("sample-draw").addEventListener("click", drawSample);
}

// A new translation: its pieces become the prefixes to choose from; the distribution after none of them.
function showSampling(source, pieces) {
  Object.assign(sampling, {source, pieces: pieces.filter((p) => p !== "</s>"), position: 0});
  $("sample-text").textContent = "";
  drawPrefix();
  drawNext();
}

function prefixText() {
  return sampling.pieces.slice(0, sampling.position).join("").replace(/\u2581/g, " ").trim();
}

function drawPrefix() {
  const box = $("sample-prefix");
  box.replaceChildren();
  for (let i = 0; i <= sampling.pieces.length; i++) {
    const label = i === 0 ? "(the start)" : showPiece(sampling.pieces[i - 1]);
    const b = el("button", {class: "alt", "aria-pressed": String(i === sampling.position), "data-testid": "sample-position",
      title: i === 0 ? "the first token" : `after the first ${i} piece(s)`,
      "aria-label": i === 0 ? "at the start" : `after piece ${i}: ${pieceName(sampling.pieces[i - 1])}`}, box, label);
    b.addEventListener("click", () => { sampling.position = i; drawPrefix(); drawNext(); });
  }
}

function samplingSettings() {
  const temperature = Number($("sample-temperature").value), topK = Number($("sample-top-k").value);
  $("sample-temperature-value").textContent = temperature.toFixed(1);
  $("sample-top-k-value").textContent = topK;
  return {source: sampling.source, prefix: prefixText(), temperature, model: state.model.name, topK};
}

async function drawNext() {
  if (!sampling.source) return;
  const {topK, ...body} = samplingSettings(), asked = ++sampling.asked, model = state.model;
  let reply;
  try {
    reply = await api("/api/next", {...body, top_k: topK});
  } catch (err) {
    setStatus(err.message, true);
    return;
  }
  if (asked !== sampling.asked || state.model !== model) return;  // a newer setting is on its way
  const box = $("next-tokens");
  box.replaceChildren();
  Object.assign(box.dataset, {probs: JSON.stringify(reply.probs), ids: JSON.stringify(reply.ids),
    temperature: body.temperature, prefix: body.prefix});
  reply.tokens.forEach((piece, i) => {
    const row = el("div", {class: "bar-row", "data-testid": "next-token"}, box);
    el("span", {class: "bar-label"}, row, showPiece(piece));
    el("span", {class: "bar"}, row).style.width = `${(100 * reply.probs[i]).toFixed(2)}%`;
    el("span", {class: "bar-value"}, row, `${(100 * reply.probs[i]).toFixed(2)}%`);
  });
}

async function drawSample() {
  if (!sampling.source) return;
  const {topK, ...body} = samplingSettings(), model = state.model;
  const seed = Number($("sample-seed").value);
  try {
    const reply = await api("/api/sample", {...body, top_k: topK, seed});
    if (state.model !== model) return;
    $("sample-text").textContent = (body.prefix ? body.prefix + " … " : "") + reply.text;
    $("sample-text").dataset.text = reply.text;
  } catch (err) {
    setStatus(err.message, true);
  }
}
