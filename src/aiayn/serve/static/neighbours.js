// Neighbours (Seq2Seq-Vis): for a source token of the first line, the reference text's tokens whose encoder states
// are nearest (POST /api/neighbours), each shown in its sentence with its cosine similarity.
"use strict";

const near = {source: "", tokens: [], position: 0, asked: 0};

function startNeighbours() {
  $("neighbours-k").addEventListener("change", drawNeighbours);
}

// A new translation: its first line's source pieces, the first one looked up.
function showNeighbours(source, tokens) {
  Object.assign(near, {source, tokens, position: 0});
  drawNeighbours();
}

function clearNeighbours() {
  Object.assign(near, {source: "", tokens: []});
  near.asked++;  // an answer still on its way is dropped
  for (const id of ["neighbours-positions", "neighbours-list"]) $(id).replaceChildren();
  $("neighbours-index").textContent = "";
}

async function drawNeighbours() {
  if (!near.source) return;
  const model = state.model, asked = ++near.asked, info = model.neighbours;
  if (!info.available) {
    $("neighbours-index").textContent = `No neighbours for ${model.name}: ${info.why}.`;
    return;
  }
  drawNeighbourPositions();
  if (!info.built) $("neighbours-index").textContent = `Building the index of ${info.source}…`;
  let n;
  try {
    n = await api("/api/neighbours", {source: near.source, position: near.position, k: Number($("neighbours-k").value),
      model: model.name});
  } catch (err) {
    if (asked !== near.asked) return;
    $("neighbours-index").textContent = err.message;
    $("neighbours-list").replaceChildren();  // nothing of another token
    return;
  }
  if (asked !== near.asked || state.model !== model) return;
  Object.assign(info, {built: true, ...n.index});
  const i = n.index;
  $("neighbours-index").textContent = `Index: ${i.tokens.toLocaleString("en")} tokens of ${i.sentences.toLocaleString("en")} ` +
    `sentences drawn from the ${i.lines.toLocaleString("en")} of ${i.source}` +
    (i.too_long ? ` (${i.too_long} drawn were longer than the model takes)` : "") + `, built in ${i.build_seconds} s.`;
  const list = $("neighbours-list");
  list.replaceChildren();
  list.dataset.position = n.position;
  for (const hit of n.neighbours) {
    const item = el("li", {"data-testid": "neighbour", "data-similarity": hit.similarity, "data-position": hit.position,
      "data-sentence": hit.sentence}, list);
    el("span", {class: "similarity"}, item, hit.similarity.toFixed(3));
    hit.tokens.forEach((t, k) => el("span", {class: k === hit.position ? "tok query" : "tok"}, item, showPiece(t)));
  }
}

function drawNeighbourPositions() {
  const box = $("neighbours-positions");
  box.replaceChildren();
  near.tokens.forEach((t, i) => {
    const b = el("button", {class: "alt", "aria-pressed": String(i === near.position),
      "aria-label": `position ${i + 1}: ${pieceName(t)}`, "data-testid": "neighbours-position"}, box, showPiece(t));
    b.addEventListener("click", () => { near.position = i; drawNeighbours(); });
  });
}
