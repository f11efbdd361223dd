// Small drawing helpers shared by app.js and figures.js: DOM and SVG elements, colours, JSON requests.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";

function el(tag, attrs = {}, parent = null, text = null) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== null) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

function svgEl(tag, attrs = {}, parent = null, text = null) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== null) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

// A weight in [0, 1] as a blue of that strength; a value in [-1, 1] as red (negative) to blue.
function weightColour(w) {
  const a = Math.max(0, Math.min(1, w));
  return `rgba(37, 99, 235, ${a.toFixed(3)})`;
}

function signedColour(v) {
  const a = Math.min(1, Math.abs(v));
  return v >= 0 ? `rgba(37, 99, 235, ${a.toFixed(3)})` : `rgba(220, 38, 38, ${a.toFixed(3)})`;
}

// POST or GET JSON; a reply that is not 2xx becomes an Error carrying the server's message.
async function api(path, body = null) {
  const options = body === null ? {} : {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
  };
  const reply = await fetch(path, options);
  const data = await reply.json();
  if (!reply.ok) throw new Error(data.field ? `${data.field}: ${data.error}` : data.error);
  return data;
}

// SentencePiece pieces for display: the word-start mark as a visible space.
function showPiece(piece) {
  return piece.replace(/\u2581/g, "\u2009");
}

// A piece as a screen reader should say it (a lone word-start mark has no letters to read).
function pieceName(piece) {
  return piece.replace(/\u2581/g, " ").trim() || "word start";
}
