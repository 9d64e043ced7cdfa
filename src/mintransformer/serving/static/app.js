// The mintransformer page: translate and explore attention, classify, or generate.
// Plain JavaScript, no libraries: everything it needs ships with the package.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const HEAD_COLORS = ["#2f5fd0", "#d0492f", "#2a9d4b", "#9b3fc4", "#d08a00", "#0e9aa7",
  "#c2185b", "#5d6d7e", "#7cb342", "#6d4c41", "#3949ab", "#f4511e"];
// `withAttention`: whether the server's engine returns attention maps (the keras engine).
const state = { attention: null, kind: "encoder", layer: 1, heads: [], view: "head",
  withAttention: true };
const $ = (id) => document.getElementById(id);

function el(name, attributes = {}, text = null) {
  const node = document.createElementNS(SVG_NS, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  if (text !== null) node.textContent = text;
  return node;
}

// Subwords as words: "▁twenty" starts a word, "ty" continues one (shown "·ty").
function readable(token) {
  if (token.startsWith("<") && token.endsWith(">")) return token;
  if (token.startsWith("▁")) return token.slice(1) || "␣";
  return "·" + token;
}

async function api(path, body) {
  const response = await fetch(path, {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
  });
  if (!response.ok) {
    let message = response.statusText;
    try { message = (await response.json()).error; } catch (err) { /* not JSON */ }
    throw new Error(`${response.status}: ${message}`);
  }
  return response;
}

// ---- translation -------------------------------------------------------------------

async function translate(event) {
  event.preventDefault();
  $("error").textContent = "";
  const beam = Number($("beam").value) || 1;
  const body = { texts: [$("source").value], beam_size: beam,
    n_best: Math.min(Number($("nbest").value) || 1, beam), attention: state.withAttention };
  try {
    const result = (await (await api("/api/translate", body)).json()).results[0];
    showTranslation(result);
  } catch (err) {
    $("error").textContent = err.message;
  }
}

function showTranslation(result) {
  $("translation").textContent = result.translation;
  const list = $("nbest-list");
  list.replaceChildren();
  for (const hypothesis of result.n_best) {
    const item = document.createElement("li");
    item.textContent = hypothesis.translation;
    if (hypothesis.score !== null) {
      const score = document.createElement("span");
      score.className = "score";
      score.textContent = hypothesis.score.toFixed(3);
      item.append(score);
    }
    list.append(item);
  }
  $("result").hidden = false;
  if (result.attention) showAttention(result.attention, ["encoder", "decoder", "cross"]);
}

// Opens the explorer on `attention` (the API's maps), offering the kinds listed.
function showAttention(attention, kinds) {
  state.attention = attention;
  if (!kinds.includes(state.kind)) selectKind(kinds[0]);
  for (const button of document.querySelectorAll("#kinds button")) {
    button.hidden = !kinds.includes(button.dataset.kind);
  }
  const layers = attention.encoder.length;
  const heads = attention.encoder[0].length;
  $("layer").replaceChildren(...Array.from({ length: layers }, (_, i) => {
    const option = document.createElement("option");
    option.value = option.textContent = String(i + 1);
    return option;
  }));
  state.layer = Math.min(state.layer, layers);
  $("layer").value = String(state.layer);
  if (state.heads.length !== heads) state.heads = Array(heads).fill(true);
  renderHeadToggles();
  $("explorer").hidden = false;
  render();
}

function selectKind(kind) {
  state.kind = kind;
  for (const button of document.querySelectorAll("#kinds button")) {
    button.classList.toggle("active", button.dataset.kind === kind);
  }
}

function renderHeadToggles() {
  $("heads").replaceChildren(...state.heads.map((on, head) => {
    const label = document.createElement("label");
    label.style.background = HEAD_COLORS[head % HEAD_COLORS.length] + "22";
    const box = document.createElement("input");
    box.type = "checkbox";
    box.checked = on;
    box.id = `head-${head}`;
    box.addEventListener("change", () => { state.heads[head] = box.checked; render(); });
    label.append(box, `head ${head}`);
    return label;
  }));
}

// (weights [head][row][col], row tokens, column tokens) of the chosen kind and layer.
function currentMaps(layer = state.layer) {
  const attention = state.attention;
  const weights = attention[state.kind][layer - 1];
  const rows = state.kind === "encoder" ? attention.source_tokens : attention.output_tokens;
  const cols = { encoder: attention.source_tokens, decoder: attention.input_tokens,
    cross: attention.source_tokens }[state.kind];
  return { weights, rows: rows.map(readable), cols: cols.map(readable) };
}

function render() {
  const box = $("figure-box");
  const figure = { head: headView, model: modelView, heatmap: heatmapView }[state.view]();
  box.replaceChildren(figure);
  $("hint").textContent = {
    head: "Rows attend to columns: each line's opacity is its weight. Hover a token to see only its lines.",
    model: "Every layer and head. Click a map to open it.",
    heatmap: "Each active head's weights; darker is more.",
  }[state.view];
}

// bertviz's head view: attending tokens left, attended tokens right, one line per pair.
function headView() {
  const { weights, rows, cols } = currentMaps();
  const step = 22, top = 30, width = 560;
  const height = top + step * Math.max(rows.length, cols.length) + 10;
  const svg = el("svg", { width, height, viewBox: `0 0 ${width} ${height}`,
    "font-family": "system-ui, sans-serif", "font-size": 13, id: "head-view" });
  svg.append(el("rect", { width, height, fill: "#ffffff" }));
  svg.append(el("text", { x: 190, y: 16, "text-anchor": "end", fill: "#6b7280" }, "attends"));
  svg.append(el("text", { x: 370, y: 16, fill: "#6b7280" }, "to"));
  const lines = el("g", { id: "lines" });
  weights.forEach((matrix, head) => {
    if (!state.heads[head]) return;
    matrix.forEach((row, i) => row.forEach((weight, j) => {
      if (weight < 0.005) return;
      lines.append(el("line", { x1: 200, y1: top + i * step - 4, x2: 360, y2: top + j * step - 4,
        stroke: HEAD_COLORS[head % HEAD_COLORS.length], "stroke-width": 2,
        "stroke-opacity": weight.toFixed(4), "data-head": head, "data-row": i, "data-col": j,
        class: "attn" }));
    }));
  });
  svg.append(lines);
  const label = (text, index, side) => {
    const node = el("text", { x: side === "row" ? 190 : 370, y: top + index * step,
      "text-anchor": side === "row" ? "end" : "start", fill: "#1d2330",
      class: `tok tok-${side}`, "data-index": index }, text);
    node.addEventListener("mouseenter", () => focus(side, index));
    node.addEventListener("mouseleave", () => focus(null, null));
    return node;
  };
  rows.forEach((text, i) => svg.append(label(text, i, "row")));
  cols.forEach((text, j) => svg.append(label(text, j, "col")));
  return svg;
}

// Shows only the lines of one token (side "row" or "col"); null shows them all.
function focus(side, index) {
  for (const line of document.querySelectorAll("#head-view line.attn")) {
    const keep = side === null || line.dataset[side] === String(index);
    line.style.display = keep ? "" : "none";
  }
  for (const token of document.querySelectorAll("#head-view .tok")) {
    const mine = side !== null && token.classList.contains(`tok-${side}`)
      && token.dataset.index === String(index);
    token.setAttribute("font-weight", mine ? "bold" : "normal");
  }
}

// One small map per layer and head; a click opens it as a heatmap.
function modelView() {
  const layers = state.attention[state.kind].length;
  const heads = state.heads.length;
  const size = 96, gap = 14, left = 60, top = 24;
  const width = left + heads * (size + gap), height = top + layers * (size + gap);
  const svg = el("svg", { width, height, viewBox: `0 0 ${width} ${height}`,
    "font-family": "system-ui, sans-serif", "font-size": 12, id: "model-view" });
  svg.append(el("rect", { width, height, fill: "#ffffff" }));
  for (let head = 0; head < heads; head++) {
    svg.append(el("text", { x: left + head * (size + gap) + size / 2, y: 15,
      "text-anchor": "middle", fill: "#6b7280" }, `head ${head}`));
  }
  for (let layer = 1; layer <= layers; layer++) {
    const y = top + (layer - 1) * (size + gap);
    svg.append(el("text", { x: 4, y: y + size / 2, fill: "#6b7280" }, `layer ${layer}`));
    const { weights } = currentMaps(layer);
    weights.forEach((matrix, head) => {
      const cell = el("g", { class: "cell", "data-layer": layer, "data-head": head,
        transform: `translate(${left + head * (size + gap)},${y})` });
      drawMatrix(cell, matrix, size / matrix[0].length, size / matrix.length, head);
      cell.append(el("rect", { width: size, height: size, fill: "none", stroke: "#d7dbe3" }));
      cell.addEventListener("click", () => openCell(layer, head));
      svg.append(cell);
    });
  }
  return svg;
}

function openCell(layer, head) {
  state.layer = layer;
  $("layer").value = String(layer);
  state.heads = state.heads.map((_, h) => h === head);
  renderHeadToggles();
  setView("heatmap");
}

function drawMatrix(parent, matrix, cellWidth, cellHeight, head) {
  const color = HEAD_COLORS[head % HEAD_COLORS.length];
  const peak = Math.max(1e-9, ...matrix.flat());
  matrix.forEach((row, i) => row.forEach((weight, j) => {
    parent.append(el("rect", { x: j * cellWidth, y: i * cellHeight, width: cellWidth + 0.3,
      height: cellHeight + 0.3, fill: color, "fill-opacity": (weight / peak).toFixed(4),
      "data-weight": weight }));
  }));
}

// The active heads' weights as heatmaps, labelled with the tokens.
function heatmapView() {
  const { weights, rows, cols } = currentMaps();
  const active = weights.map((_, h) => h).filter((h) => state.heads[h]);
  const cell = 22, labelWidth = 90, labelHeight = 70, gap = 30;
  const mapWidth = labelWidth + cols.length * cell;
  const width = Math.max(200, active.length * (mapWidth + gap));
  const height = 20 + labelHeight + rows.length * cell + 10;
  const svg = el("svg", { width, height, viewBox: `0 0 ${width} ${height}`,
    "font-family": "system-ui, sans-serif", "font-size": 11, id: "heatmap-view" });
  svg.append(el("rect", { width, height, fill: "#ffffff" }));
  active.forEach((head, n) => {
    const group = el("g", { transform: `translate(${n * (mapWidth + gap)},0)`,
      "data-head": head, class: "heatmap" });
    group.append(el("text", { x: labelWidth, y: 14, "font-size": 12 },
      `${state.kind}, layer ${state.layer}, head ${head}`));
    cols.forEach((text, j) => group.append(el("text", { class: "tok tok-col",
      transform: `translate(${labelWidth + j * cell + cell / 2 + 4},${20 + labelHeight - 4}) rotate(-60)`,
    }, text)));
    rows.forEach((text, i) => group.append(el("text", { x: labelWidth - 4,
      y: 20 + labelHeight + i * cell + cell / 2 + 4, "text-anchor": "end", class: "tok tok-row" },
    text)));
    const body = el("g", { transform: `translate(${labelWidth},${20 + labelHeight})` });
    drawMatrix(body, weights[head], cell, cell, head);
    group.append(body);
    svg.append(group);
  });
  if (!active.length) svg.append(el("text", { x: 10, y: 30 }, "no head selected"));
  return svg;
}

function setView(view) {
  state.view = view;
  for (const button of document.querySelectorAll("#views button")) {
    button.classList.toggle("active", button.dataset.view === view);
  }
  render();
}

// ---- saving a view ---------------------------------------------------------------------

// The SVG of the view shown.
const currentFigure = () => $("figure-box").firstElementChild;

function figureSource() {
  const figure = currentFigure().cloneNode(true);
  figure.setAttribute("xmlns", SVG_NS);
  return new XMLSerializer().serializeToString(figure);
}

function download(url, name) {
  const link = document.createElement("a");
  link.href = url;
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
}

function fileName(extension) {
  return `attention-${state.kind}-layer${state.layer}-${state.view}.${extension}`;
}

function saveSvg() {
  const blob = new Blob([figureSource()], { type: "image/svg+xml" });
  download(URL.createObjectURL(blob), fileName("svg"));
}

function savePng() {
  const figure = currentFigure();
  const scale = 2, width = Number(figure.getAttribute("width")),
    height = Number(figure.getAttribute("height"));
  const image = new Image();
  image.onload = () => {
    const canvas = document.createElement("canvas");
    canvas.width = width * scale;
    canvas.height = height * scale;
    const context = canvas.getContext("2d");
    context.scale(scale, scale);
    context.drawImage(image, 0, 0);
    canvas.toBlob((blob) => {
      window.lastSavedPng = blob.size;
      download(URL.createObjectURL(blob), fileName("png"));
    }, "image/png");
  };
  image.src = "data:image/svg+xml;charset=utf-8," + encodeURIComponent(figureSource());
}

// ---- classification and generation -----------------------------------------------------

async function classify(event) {
  event.preventDefault();
  $("classify-error").textContent = "";
  try {
    const body = { texts: [$("text").value], attention: state.withAttention };
    const result = (await (await api("/api/classify", body)).json()).results[0];
    $("labels").replaceChildren(...Object.entries(result.probabilities)
      .sort((a, b) => b[1] - a[1]).map(([label, p]) => {
        const row = document.createElement("div");
        row.className = "bar";
        const bar = document.createElement("div");
        bar.style.width = `${(100 * p).toFixed(1)}%`;
        const name = document.createElement("span");
        name.textContent = label;
        const value = document.createElement("span");
        value.textContent = p.toFixed(3);
        const track = document.createElement("span");
        track.append(bar);
        row.append(name, track, value);
        return row;
      }));
    if (result.attention) {
      const tokens = result.attention.tokens;
      $("explorer-title").textContent = "Attention over the input";
      showAttention({ source_tokens: tokens, input_tokens: tokens, output_tokens: tokens,
        encoder: result.attention.encoder }, ["encoder"]);
    }
  } catch (err) {
    $("classify-error").textContent = err.message;
  }
}

async function generate(event) {
  event.preventDefault();
  $("generate-error").textContent = "";
  const output = $("generated");
  output.textContent = $("prompt").value;
  output.dataset.tokens = "0";
  output.dataset.done = "false";
  try {
    const response = await api("/api/generate", { prompt: $("prompt").value, stream: true,
      max_new_tokens: Number($("new-tokens").value) || 1,
      temperature: Number($("temperature").value) });
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let pending = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      pending += decoder.decode(value, { stream: true });
      const lines = pending.split("\n");
      pending = lines.pop();
      for (const line of lines.filter(Boolean)) {
        const event = JSON.parse(line);
        if ("token" in event) {
          output.textContent += event.token;
          output.dataset.tokens = String(Number(output.dataset.tokens) + 1);
        }
      }
    }
    output.dataset.done = "true";
  } catch (err) {
    $("generate-error").textContent = err.message;
  }
}

// ---- start -------------------------------------------------------------------------------

async function start() {
  const info = await (await fetch("/api/info")).json();
  const sizes = info.sizes || {};
  $("run-info").textContent = `${info.task} run “${info.run}” (${info.engine}; `
    + `${sizes.num_layers ?? "?"} layers, d_model ${sizes.d_model ?? "?"}, `
    + `${sizes.num_heads ?? "?"} heads)`;
  const panel = { translation: "translation-panel", classification: "classification-panel",
    language_model: "generation-panel" }[info.task];
  $(panel).hidden = false;
  state.withAttention = info.engine === "keras";
  $("no-attention").hidden = state.withAttention;
  $("translate-form").addEventListener("submit", translate);
  $("classify-form").addEventListener("submit", classify);
  $("generate-form").addEventListener("submit", generate);
  for (const button of document.querySelectorAll("#kinds button")) {
    button.addEventListener("click", () => { selectKind(button.dataset.kind); render(); });
  }
  for (const button of document.querySelectorAll("#views button")) {
    button.addEventListener("click", () => setView(button.dataset.view));
  }
  $("layer").addEventListener("change", () => { state.layer = Number($("layer").value); render(); });
  $("save-png").addEventListener("click", savePng);
  $("save-svg").addEventListener("click", saveSvg);
  document.body.dataset.ready = "true";
}

start();
