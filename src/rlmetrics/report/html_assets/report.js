// rlmetrics report --html: draws the run's data (the JSON block above) with the DOM and SVG
// only. No network: the page's Content-Security-Policy forbids every fetch.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("rlmetrics-data").textContent);
  const SVG = "http://www.w3.org/2000/svg";
  const BUCKETS = { productive: "#4c9f70", overhead: "#5b8db8", idle: "#e07b39", wasted: "#d64550", none: "#b0b0b0" };
  const PALETTE = ["#e07b39", "#d64550", "#8e6cb8", "#c9a227", "#3ba3a3", "#b86c9a", "#7a8a3b", "#9a6b4b"];

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v; else node.setAttribute(k, v);
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }
  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    for (const child of children) node.append(child instanceof Node ? child : String(child));
    return node;
  }
  function fmt(v, digits) {
    if (v === null || v === undefined || v === "") return "";
    if (typeof v !== "number") return String(v);
    if (Number.isInteger(v)) return String(v);
    const a = Math.abs(v);
    if (a !== 0 && (a < 0.001 || a >= 1e6)) return v.toExponential(2);
    return v.toFixed(digits === undefined ? (a < 1 ? 4 : 2) : digits);
  }
  // A number shown in fixed decimals (not one too small or too large for them, which fmt
  // writes as an exponent).
  function fixable(v) {
    if (typeof v !== "number" || !Number.isFinite(v)) return false;
    const a = Math.abs(v);
    return Number.isInteger(v) || a === 0 || (a >= 0.001 && a < 1e6);
  }
  function title(text) { return svg("title", {}, text); }
  // An axis's two ends with the same decimals: each formatted by its own size read "0.9000"
  // under "1.10", as if on two scales.
  function axisEnds(lo, hi) {
    if (!fixable(lo) || !fixable(hi) || (Number.isInteger(lo) && Number.isInteger(hi))) return [fmt(lo), fmt(hi)];
    const digits = Math.min(Math.abs(lo), Math.abs(hi)) < 1 ? 4 : 2;
    return [lo.toFixed(digits), hi.toFixed(digits)];
  }
  // [least, greatest] of numbers by a loop: Math.min(...values) passes each as an argument,
  // and past about 125 000 (a run's steps) V8 throws "Maximum call stack size exceeded".
  function extent(values) {
    let lo = Infinity, hi = -Infinity;
    for (const v of values) { if (v < lo) lo = v; if (v > hi) hi = v; }
    return [lo, hi];
  }
  // Seconds with the digits their size needs: a step of milliseconds is not "0.0 s".
  function seconds(v) { return fmt(v, Math.abs(v) >= 10 ? 1 : undefined) + " s"; }

  // -- header ----------------------------------------------------------------------------------
  function header() {
    const g = DATA.goodput || {};
    const t = DATA.trajectories;
    // The run's steps, not the timed ones (g.steps): a run logging no efficiency keys read
    // "0 steps" and "0 s step wall time"; its time cards are left out instead.
    const timed = g.steps > 0;
    const cards = [
      ["steps", DATA.step_count],
      ["goodput", !timed || g.goodput_pct === undefined || g.goodput_pct === null ? "" : fmt(g.goodput_pct, 1) + " %"],
      // The timed steps' sum: "977.9 s step wall time" beside "40 steps" read as one step's.
      [`total step wall time (${g.steps} step${g.steps === 1 ? "" : "s"})`, !timed || g.step_wall_time_s === undefined || g.step_wall_time_s === null ? "" : seconds(g.step_wall_time_s)],
      ["trajectories", t.total],
    ];
    const box = document.getElementById("header");
    box.append(
      el("h1", {}, "rlmetrics run " + (DATA.run_id || "")),
      el("div", { class: "meta" }, DATA.source + (DATA.traces.length ? " · spans from " + DATA.traces.join(", ") : "")),
      el("div", { class: "cards" }, ...cards.filter(c => c[1] !== undefined && c[1] !== "")
        .map(([k, v]) => el("div", { class: "card" }, el("b", {}, v), el("span", {}, k)))),
    );
  }

  // -- line charts -----------------------------------------------------------------------------
  function lineChart(name, points, unit) {
    const W = 330, H = 170, L = 52, R = 10, T = 10, B = 26;
    const xs = points.map(p => p[0]), ys = points.map(p => p[1]);
    let [x0, x1] = extent(xs);
    let [y0, y1] = extent(ys);
    // One step: the axis is widened around its point, but names that step only (it read
    // "step 0" to "2", steps never logged).
    const [first, last] = [x0, x1];
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    if (y0 === y1) { y0 -= Math.abs(y0) * 0.1 || 1; y1 += Math.abs(y1) * 0.1 || 1; }
    const X = x => L + (x - x0) / (x1 - x0) * (W - L - R);
    const Y = y => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
    const chart = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": name });
    const [foot, top] = axisEnds(y0, y1);
    chart.append(
      svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }),
      svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }),
      svg("text", { x: L - 4, y: T + 9, "text-anchor": "end" }, top),
      svg("text", { x: L - 4, y: H - B, "text-anchor": "end" }, foot),
    );
    if (first === last) chart.append(svg("text", { x: X(first), y: H - 8, "text-anchor": "middle" }, "step " + fmt(first)));
    else chart.append(svg("text", { x: L, y: H - 8 }, "step " + fmt(first)), svg("text", { x: W - R, y: H - 8, "text-anchor": "end" }, fmt(last)));
    const d = points.map((p, i) => (i ? "L" : "M") + X(p[0]).toFixed(1) + " " + Y(p[1]).toFixed(1)).join(" ");
    chart.append(svg("path", { class: "curve", d: d }));
    if (points.length <= 60) {
      for (const [x, y] of points) {
        chart.append(svg("circle", { cx: X(x), cy: Y(y), r: 2.2, fill: "#3b6fb6" }, title(`step ${x}: ${fmt(y)}${unit || ""}`)));
      }
    }
    return el("div", { class: "chart" }, el("h3", {}, name), chart);
  }

  function curves() {
    const box = document.getElementById("curves");
    const names = Object.keys(DATA.curves);
    if (!names.length) { box.append(el("p", { class: "empty" }, "The run logged no curves.")); return; }
    box.append(el("div", { class: "charts" }, ...names.map(n => lineChart(n, DATA.curves[n]))));
  }

  function lastStep(s) { return s.steps ? s.last_step : s.step; }

  // -- goodput: stacked seconds per step ---------------------------------------------------------
  function goodput() {
    const box = document.getElementById("goodput");
    const steps = DATA.steps.filter(s => typeof s.wall_time_s === "number");
    if (!steps.length) { box.append(el("p", { class: "empty" }, "No step timings in this run.")); return; }
    const cats = [...new Set(steps.flatMap(s => Object.keys(s.idle_s || {})))].sort();
    const colour = c => PALETTE[cats.indexOf(c) % PALETTE.length];
    const W = Math.max(680, Math.min(1400, steps.length * 18 + 80)), H = 240, L = 52, R = 10, T = 10, B = 26;
    // A long run's bars are runs of consecutive steps (s.steps of them, s.step to
    // s.last_step): each part is the steps' mean, and a whisker spans the shortest to the
    // longest step, so the axis reaches the longest step of all.
    const top = extent(steps.map(s => (s.steps ? s.wall_max_s : s.wall_time_s)))[1] || 1;
    const named = s => (s.steps ? `steps ${s.step}–${s.last_step} (${s.steps}, mean)` : `step ${s.step}`);
    const bw = (W - L - R) / steps.length;
    const Y = v => T + (1 - v / top) * (H - T - B);
    const chart = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "goodput per step" });
    chart.append(
      svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }),
      svg("text", { x: L - 4, y: T + 9, "text-anchor": "end" }, seconds(top)),
      svg("text", { x: L - 4, y: H - B, "text-anchor": "end" }, "0"),
      svg("text", { x: L, y: H - 8 }, "step " + steps[0].step),
      svg("text", { x: W - R, y: H - 8, "text-anchor": "end" }, "step " + lastStep(steps[steps.length - 1])),
    );
    steps.forEach((s, i) => {
      const x = L + i * bw + bw * 0.1, w = Math.max(1, bw * 0.8);
      let base = 0;
      const parts = [["productive", s.productive_s, BUCKETS.productive]]
        .concat(cats.map(c => [c, (s.idle_s || {})[c] || 0, colour(c)]));
      const other = s.wall_time_s - parts.reduce((a, p) => a + (p[1] || 0), 0);
      if (other > 1e-9) parts.push(["other", other, BUCKETS.none]);
      for (const [name, v, c] of parts) {
        if (!v) continue;
        chart.append(svg("rect", { x: x, y: Y(base + v), width: w, height: Y(base) - Y(base + v), fill: c },
          title(`${named(s)} · ${name}: ${seconds(v)}` + (name === "productive" ? ` · goodput ${fmt(s.goodput_pct, 1)} %` : ""))));
        base += v;
      }
      if (s.steps && s.wall_max_s > s.wall_min_s) {
        const mid = x + w / 2;
        chart.append(svg("line", { class: "whisker", x1: mid, x2: mid, y1: Y(s.wall_min_s), y2: Y(s.wall_max_s) },
          title(`steps ${s.step}–${s.last_step}: shortest ${seconds(s.wall_min_s)}, longest ${seconds(s.wall_max_s)} (step ${s.longest_step})`)));
      }
    });
    const legend = el("div", { class: "legend" },
      el("span", {}, el("i", { style: "background:" + BUCKETS.productive }), "productive"),
      ...cats.map(c => el("span", {}, el("i", { style: "background:" + colour(c) }), c)));
    box.append(legend, el("div", { class: "chart" }, chart));
  }

  // -- timeline: phases by lane, steps shaded -----------------------------------------------------
  // Which of the traced steps the timeline shows: by default a window of the first ones, which
  // without a word was read as the whole run.
  function windowCaption(tl) {
    const range = (a, b) => (a === b ? String(a) : `${a}–${b}`);
    const all = tl.traced ? ` (${range(tl.first, tl.last)})` : "";
    const shown = tl.steps.map(s => s.step).filter(n => typeof n === "number");
    if (!shown.length) {
      return tl.asked ? `No traced step is in the window --timeline-steps chose; the ${tl.traced} traced are${all}.` : "";
    }
    const [lo, hi] = extent(shown);
    if (!tl.asked && shown.length >= tl.traced) return `All ${tl.traced} traced steps${all}.`;
    if (!tl.asked && tl.chosen && shown.length < tl.default_steps) {
      return `Steps ${range(lo, hi)} of the ${tl.traced} traced${all}: those --steps or --tail chose. `
        + "--timeline-steps FIRST:LAST draws others.";
    }
    const steps = `Steps ${range(lo, hi)} of the ${tl.traced} traced${all}`;
    if (tl.asked) return `${steps}, as --timeline-steps chose.`;
    const of = tl.chosen ? ` of the steps --steps or --tail chose (${range(tl.chosen[0], tl.chosen[1])})` : "";
    return `${steps}: the first ${tl.default_steps}${of}. --timeline-steps FIRST:LAST draws others.`;
  }
  function timeline() {
    const box = document.getElementById("timeline");
    const tl = DATA.timeline;
    if (!tl) { box.append(el("p", { class: "empty" }, "No spans: give the run's traces file with --traces to see its timeline.")); return; }
    const caption = windowCaption(tl);
    if (caption) box.append(el("p", { class: "note" }, caption));
    if (!tl.lanes.length) { box.append(el("p", { class: "empty" }, "The traces hold no phases for these steps.")); return; }
    // The lanes' names fit the margin left of the chart: a name right-aligned in a fixed
    // 200 px lost its start past the edge ("r / rollout-..." for "driver / rollout-...").
    // The margin grows with the longest name up to NAMES px; a longer name is cut in its
    // middle (its process and its thread stay) and its tooltip is the whole name.
    const CHAR = 6.6, NAMES = 420;
    const longest = Math.max(0, ...tl.lanes.map(lane => lane.name.length));
    const LANE = 22, L = Math.min(NAMES, Math.max(120, 16 + longest * CHAR)), R = 10, T = 18, W = 1300;
    const fits = Math.floor((L - 16) / CHAR);
    const cut = name => (name.length <= fits ? name
      : name.slice(0, Math.ceil((fits - 1) / 2)) + "…" + name.slice(name.length - Math.floor((fits - 1) / 2)));
    const H = T + tl.lanes.length * LANE + 24;
    const end = Math.max(tl.end, 1e-9);
    const X = t => L + t / end * (W - L - R);
    const chart = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "timeline" });
    tl.steps.forEach((s, i) => {
      chart.append(svg("rect", { x: X(s.start), y: T - 14, width: Math.max(1, X(s.end) - X(s.start)), height: H - T - 10 + 14,
        fill: i % 2 ? "#f2f4f7" : "#e9edf2" }, title(`step ${s.step}: ${seconds(s.end - s.start)}`)));
      chart.append(svg("text", { x: X(s.start) + 3, y: T - 4 }, "step " + s.step));
    });
    tl.lanes.forEach((lane, i) => {
      const y = T + i * LANE;
      chart.append(svg("text", { class: "lane", x: L - 6, y: y + 15, "text-anchor": "end" }, title(lane.name), cut(lane.name)));
      for (const [start, stop, phase, bucket, depth] of lane.spans) {
        const inset = Math.min(depth, 3) * 3;
        chart.append(svg("rect", { x: X(start), y: y + 2 + inset, width: Math.max(0.5, X(stop) - X(start)),
          height: LANE - 4 - 2 * inset, fill: BUCKETS[bucket || "none"], stroke: "#fff", "stroke-width": 0.5 },
          title(`${phase} (${bucket || "no bucket"}): ${fmt(stop - start, 3)} s`)));
      }
    });
    chart.append(svg("text", { x: W - R, y: H - 4, "text-anchor": "end" }, seconds(end)));
    const legend = el("div", { class: "legend" }, ...Object.entries(BUCKETS).map(([k, c]) =>
      el("span", {}, el("i", { style: "background:" + c }), k === "none" ? "no bucket" : k)));
    box.append(legend, el("div", { class: "chart" }, chart));
  }

  // -- trajectories ------------------------------------------------------------------------------
  // Trajectory rows listed at once; "show more" lists the next as many.
  const PAGE = 500;
  // [row key, header, numeric, the header's tooltip: what the samples file's column holds].
  const COLUMNS = [
    ["step", "step", true, "step: the training step the trajectory was logged at"],
    ["sample_id", "sample", false, "sample_id: the rollout"],
    ["group_id", "group", false, "group_id: the rollout's group (GRPO's prompt)"],
    ["env", "env", false, "env: the environment or dataset"],
    ["outcome", "outcome", false, "outcome: success, failure, error or truncated"],
    ["finish_reason", "finish", false, "finish_reason: why the rollout ended"],
    ["reward", "reward", true, "reward: the trajectory's total reward"],
    ["turns", "turns", true, "turns: how many turns the rollout took"],
    ["tool_calls", "tool calls", true, "tool_calls: how many tool calls it made"],
    ["input_tokens", "tokens in", true, "input_tokens: prompt tokens, over its generations"],
    ["output_tokens", "tokens out", true, "output_tokens: generated tokens, over its generations"],
    ["latency_s", "latency s", true, "latency_s: the rollout's wall time, in seconds"],
    ["weight_version", "weights", true, "weight_version: the version of the policy weights that generated it"],
  ];

  // The decimals a column's numbers share: as many as its most precise one needs, at most
  // `most`. Each number on its own read 0, 0.5000 and 1 in one column (a whole number lost
  // its decimals, a fraction got four); the column reads 0.0, 0.5 and 1.0.
  function columnDigits(values, most) {
    let digits = 0;
    for (const v of values) {
      if (!fixable(v)) continue;
      while (digits < most && Number(v.toFixed(digits)) !== Number(v.toFixed(most))) digits++;
    }
    return digits;
  }
  function cellText(v, digits) { return fixable(v) ? v.toFixed(digits) : fmt(v); }

  function textBlock(label, text) {
    if (text === undefined || text === null || text === "") return null;
    return el("div", {}, el("div", { class: "item" }, el("span", { class: "tag" }, label)),
      el("pre", { class: "text" }, typeof text === "string" ? text : JSON.stringify(text, null, 1)));
  }

  function itemNode(item) {
    if (item.kind === "generation") {
      const bits = [item.model || "model"];
      const count = v => (v === undefined ? "?" : fmt(v));
      if (item.input_tokens !== undefined || item.output_tokens !== undefined) {
        bits.push(`${count(item.input_tokens)} → ${count(item.output_tokens)} tokens`);
      }
      if (item.finish_reason) bits.push("finish " + item.finish_reason);
      if (item.latency_s !== undefined) bits.push(fmt(item.latency_s, 3) + " s");
      return el("div", { class: "item generation" }, el("div", {}, el("span", { class: "tag" }, "generation"), bits.join(" · ")),
        textBlock("prompt", item.prompt), textBlock("completion", item.completion));
    }
    if (item.kind === "tool") {
      const bits = [item.name || "tool", item.outcome || ""];
      if (item.error) bits.push(item.error);
      if (item.latency_s !== undefined) bits.push(fmt(item.latency_s, 3) + " s");
      return el("div", { class: "item tool " + (item.outcome || ""), "data-tool": item.name || "" }, el("div", {}, el("span", { class: "tag" }, "tool call"),
        bits.filter(Boolean).join(" · ")), textBlock("arguments", item.arguments), textBlock("result", item.result));
    }
    return el("div", { class: "item reward" }, el("span", { class: "tag" }, "reward"),
      `${item.component || "reward"} = ${fmt(item.value)}`);
  }

  function detail(row) {
    const box = el("div", {});
    if (row.spans) {
      row.spans.turns.forEach((turn, i) => box.append(el("div", { class: "turn" }, el("b", {}, `Turn ${i + 1}`),
        ...(turn.length ? turn.map(itemNode) : [el("div", { class: "note" }, "(nothing recorded in this turn)")]))));
      if (!row.spans.turns.length) box.append(el("div", { class: "note" }, "No turns."));
      for (const r of row.spans.rewards) box.append(itemNode(r));
    } else {
      // Only the counts the row has: a row of the user's own may have neither (it read
      // "turns, tool calls: give ...", the counts left blank).
      const counts = [["turns", "turns"], ["tool_calls", "tool calls"]]
        .filter(([k]) => typeof row[k] === "number").map(([k, label]) => `${fmt(row[k])} ${label}`).join(", ");
      box.append(el("div", { class: "note" }, DATA.trajectories.traced
        ? "No spans for this trajectory (the span budget kept rows only)" + (counts ? `: ${counts}.` : ".")
        : counts ? `${counts}: give the run's traces file with --traces to see each.`
          : "Give the run's traces file with --traces to see its turns and tool calls."));
      const parts = Object.keys(row).filter(k => k.startsWith("reward/"));
      for (const k of parts) box.append(itemNode({ kind: "reward", component: k.slice(7), value: row[k] }));
    }
    for (const [k, label] of [["error", "error"], ["agent", "agent"], ["trace_id", "trace id"]]) {
      if (row[k] !== undefined) box.append(el("div", { class: "note" }, `${label}: ${row[k]}`));
    }
    box.append(...[textBlock("prompt", row.prompt), textBlock("completion", row.completion)].filter(Boolean));
    return box;
  }

  function trajectories() {
    const box = document.getElementById("trajectories");
    const t = DATA.trajectories;
    const rows = t.rows;
    // A live trajectory without logger= has spans but no row: say so, rather than "none".
    const unrowed = t.spans_without_rows ? el("p", { class: "note" }, `The traces hold ${t.spans_without_rows} trajectory spans `
      + "that no row of the samples file matches (a live rlmetrics.trajectory without logger= writes spans and metrics, no row).") : null;
    if (!rows.length) {
      box.append(el("p", { class: "empty" }, "The run logged no trajectory rows (no 'trajectories' rows in its samples file)."), ...[unrowed].filter(Boolean));
      return;
    }
    const distinct = key => [...new Set(rows.map(r => r[key]).filter(v => v !== undefined && v !== null))].sort();
    const select = (id, label, values) => el("label", {}, label, el("select", { id: id },
      el("option", { value: "" }, "all"), ...values.map(v => el("option", { value: String(v) }, String(v)))));
    const filters = el("div", { class: "filters" },
      select("f-outcome", "outcome", distinct("outcome")),
      select("f-env", "env", distinct("env")),
      el("label", {}, "reward ≥", el("input", { id: "f-reward-min", type: "number", step: "any" })),
      el("label", {}, "reward ≤", el("input", { id: "f-reward-max", type: "number", step: "any" })),
      el("label", {}, "sample / group", el("input", { id: "f-text", type: "search", placeholder: "id contains…" })),
      el("span", { id: "shown" }));
    const body = el("tbody", {});
    const table = el("table", { id: "trajectory-table" },
      el("thead", {}, el("tr", {}, ...COLUMNS.map(([, label, num, what]) => el("th", { class: num ? "num" : "", title: what }, label)))), body);
    const note = t.total > rows.length ? el("p", { class: "note" }, `The newest ${rows.length} of ${t.total} trajectories.`) : null;
    const spanNote = el("p", { class: "note" }, t.traced
      ? `${t.with_spans} of ${rows.length} trajectories have spans; click a row for its turns.`
      : "Click a row for its counts; with --traces a row opens into its turns and tool calls.");
    const cutNote = t.texts_cut_to ? el("p", { class: "note" }, `Kept texts longer than ${t.texts_cut_to} characters are cut here, `
      + "so that the page stays small enough to open; the samples file and the spans hold them whole.") : null;
    box.append(...[filters, note, spanNote, unrowed, cutNote, table].filter(Boolean));

    // Rows are built when first listed, and at most a page of them is listed at once: a
    // table of every row of a large run took seconds to open and to refilter.
    const nodes = new Array(rows.length);
    const digits = Object.fromEntries(COLUMNS.filter(c => c[2]).map(([key]) =>
      [key, columnDigits(rows.map(r => r[key]), key === "latency_s" ? 3 : 4)]));
    function node(i) {
      if (nodes[i]) return nodes[i];
      const row = rows[i];
      const cells = COLUMNS.map(([key, , num]) => {
        const v = row[key];
        if (key === "outcome") {
          // No outcome, no pill (pills of an outcome but the four are grey).
          return el("td", { title: fmt(v) }, v === undefined || v === null || v === "" ? null
            : el("span", { class: "cut outcome " + v }, v));
        }
        const text = num ? cellText(v, digits[key]) : fmt(v);
        // An id or name can be hundreds of characters with nowhere to break: the cell shows its
        // start (CSS cuts it) and its title the whole value.
        return el("td", { class: num ? "num" : "", title: text }, el("span", { class: "cut" }, text));
      });
      const tr = el("tr", { class: "traj", "data-index": String(i) }, ...cells);
      tr.addEventListener("click", () => {
        const next = tr.nextSibling;
        if (next && next.classList && next.classList.contains("detail")) { next.remove(); tr.classList.remove("open"); return; }
        tr.classList.add("open");
        tr.after(el("tr", { class: "detail" }, el("td", { colspan: String(COLUMNS.length) }, detail(row))));
      });
      return (nodes[i] = tr);
    }

    let matching = [];
    let listed = 0;
    const more = el("button", { id: "more", type: "button" });
    box.append(more);
    function list(count) {
      const next = matching.slice(listed, listed + count).map(i => {
        const tr = node(i);
        tr.classList.remove("open");
        return tr;
      });
      body.append(...next);
      listed += next.length;
      const left = matching.length - listed;
      more.hidden = left <= 0;
      more.textContent = `show ${Math.min(PAGE, left)} more (${listed} of ${matching.length} listed)`;
      // Said above the table too: "1280 of 1280 trajectories" over 500 rows read as all listed.
      document.getElementById("shown").textContent = `${matching.length} of ${rows.length} trajectories`
        + (left > 0 ? ` (${listed} listed; 'show more' below the table lists more)` : "");
    }
    more.addEventListener("click", () => list(PAGE));

    function apply() {
      const outcome = document.getElementById("f-outcome").value;
      const env = document.getElementById("f-env").value;
      const lo = parseFloat(document.getElementById("f-reward-min").value);
      const hi = parseFloat(document.getElementById("f-reward-max").value);
      const text = document.getElementById("f-text").value.trim().toLowerCase();
      matching = [];
      rows.forEach((row, i) => {
        if (outcome && String(row.outcome) !== outcome) return;
        if (env && String(row.env) !== env) return;
        if (!Number.isNaN(lo) && !(row.reward >= lo)) return;
        if (!Number.isNaN(hi) && !(row.reward <= hi)) return;
        if (text && !(`${row.sample_id} ${row.group_id}`.toLowerCase().includes(text))) return;
        matching.push(i);
      });
      body.replaceChildren();
      listed = 0;
      list(PAGE);
    }
    for (const id of ["f-outcome", "f-env", "f-reward-min", "f-reward-max", "f-text"]) {
      document.getElementById(id).addEventListener("input", apply);
    }
    apply();
  }

  header();
  curves();
  goodput();
  timeline();
  trajectories();
  document.body.setAttribute("data-ready", "1");
})();
