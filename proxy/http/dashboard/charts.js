// Line charts drawn as inline SVG, in plain JavaScript (no library, nothing fetched).
//
// lineChart(element, spec) replaces element's content with one chart:
//   spec.lines  [{name, color, points: [[t_s, value], ...], dashed}]
//   spec.band   optional {color, low: [[t_s, v]...], high: [[t_s, v]...]} (an interval)
//   spec.rules  optional [{name, color, value}] (a target drawn across)
//   spec.format value → label of the y axis; spec.yMin / spec.yMax fix the scale
//   spec.log    a logarithmic y axis (latencies: a slow first miss must not flatten the hits)
// Every line's <path> carries data-series (its name) and data-points (how many points it has),
// so a test, or a curious operator, can read what was drawn.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 560;
const HEIGHT = 180;
const PAD = { left: 56, right: 12, top: 10, bottom: 24 };

function svgNode(name, attributes) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) {
    node.setAttribute(key, String(value));
  }
  return node;
}

function extent(values, fixedMin, fixedMax) {
  let low = fixedMin ?? Math.min(...values);
  let high = fixedMax ?? Math.max(...values);
  if (!Number.isFinite(low) || !Number.isFinite(high)) {
    return [0, 1];
  }
  if (high - low < 1e-12) {
    high = low + (Math.abs(low) > 0 ? Math.abs(low) * 0.1 : 1);
  }
  return [low, high];
}

function clock(t_s) {
  return new Date(t_s * 1000).toTimeString().slice(0, 8);
}

function pathOf(points, x, y) {
  return points
    .map(([t, v], i) => `${i === 0 ? "M" : "L"}${x(t).toFixed(1)},${y(v).toFixed(1)}`)
    .join(" ");
}

export function lineChart(element, spec) {
  if (spec.log) {
    spec = logarithmic(spec);
  }
  const lines = spec.lines.filter((line) => line.points.length > 0);
  const band = spec.band && spec.band.low.length > 0 ? spec.band : null;
  const rules = spec.rules || [];
  const format = spec.format || ((v) => v.toPrecision(3));
  const times = lines.flatMap((line) => line.points.map(([t]) => t));
  const values = lines.flatMap((line) => line.points.map(([, v]) => v));
  if (band) {
    values.push(...band.low.map(([, v]) => v), ...band.high.map(([, v]) => v));
  }
  values.push(...rules.map((rule) => rule.value));

  const svg = svgNode("svg", {
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    class: "chart",
    role: "img",
    "aria-label": spec.title || "chart",
  });
  if (times.length === 0) {
    const empty = svgNode("text", { x: WIDTH / 2, y: HEIGHT / 2, class: "empty" });
    empty.textContent = "waiting for the first sample…";
    svg.append(empty);
    element.replaceChildren(svg);
    return;
  }
  const [t0, t1] = extent(times);
  const [v0, v1] = extent(values, spec.yMin, spec.yMax);
  const x = (t) => PAD.left + ((t - t0) / (t1 - t0)) * (WIDTH - PAD.left - PAD.right);
  const y = (v) => HEIGHT - PAD.bottom - ((v - v0) / (v1 - v0)) * (HEIGHT - PAD.top - PAD.bottom);

  for (const v of [v0, (v0 + v1) / 2, v1]) {
    svg.append(svgNode("line", { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(v), y2: y(v), class: "grid" }));
    const label = svgNode("text", { x: PAD.left - 6, y: y(v) + 4, class: "axis", "text-anchor": "end" });
    label.textContent = format(v);
    svg.append(label);
  }
  for (const [t, anchor] of [[t0, "start"], [t1, "end"]]) {
    const label = svgNode("text", { x: x(t), y: HEIGHT - 6, class: "axis", "text-anchor": anchor });
    label.textContent = clock(t);
    svg.append(label);
  }
  if (band) {
    const outline = [...band.high, ...[...band.low].reverse()];
    svg.append(svgNode("path", { d: `${pathOf(outline, x, y)} Z`, fill: band.color, "fill-opacity": 0.18, stroke: "none", "data-band": band.name || "interval" }));
  }
  for (const rule of rules) {
    svg.append(svgNode("line", { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(rule.value), y2: y(rule.value), stroke: rule.color, "stroke-dasharray": "6 4", "data-rule": rule.name }));
  }
  for (const line of lines) {
    const path = svgNode("path", {
      d: pathOf(line.points, x, y),
      fill: "none",
      stroke: line.color,
      "stroke-width": 2,
      "data-series": line.name,
      "data-points": line.points.length,
    });
    if (line.dashed) {
      path.setAttribute("stroke-dasharray", "4 3");
    }
    svg.append(path);
  }
  const legend = document.createElement("div");
  legend.className = "legend";
  for (const item of [...lines, ...rules]) {
    const key = document.createElement("span");
    const swatch = document.createElement("i");
    swatch.className = "swatch";
    swatch.style.background = item.color;
    key.append(swatch, document.createTextNode(item.name));
    legend.append(key);
  }
  element.replaceChildren(svg, legend);
}

// The same chart over log10 of its values (all positive: latencies), labelled in the values.
function logarithmic(spec) {
  const log = (points) => points.map(([t, v]) => [t, Math.log10(Math.max(v, 1e-7))]);
  const format = spec.format || ((v) => v.toPrecision(3));
  return {
    ...spec,
    log: false,
    yMin: undefined,
    yMax: undefined,
    format: (v) => format(10 ** v),
    lines: spec.lines.map((line) => ({ ...line, points: log(line.points) })),
  };
}

// A palette that tells a dozen lines apart.
export const COLORS = [
  "#2563eb", "#16a34a", "#dc2626", "#9333ea", "#ea580c", "#0891b2",
  "#ca8a04", "#db2777", "#4b5563", "#65a30d", "#7c3aed", "#0d9488",
];
