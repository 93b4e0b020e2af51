/* Interactive figures of "Attention from scratch" (attention_book.interactive, issue 28).
   Plain JavaScript, no library and no network: each figure's data sit in a <script type="application/json">
   inside its own <figure>, emitted by the package from the chapter's computation. Every control is a
   native <button> or <select>, reachable with Tab; arrow keys move between tokens; what the colours show
   is also written as numbers and announced in a live region. Loaded once per page however many figures
   it holds. */
(function () {
  "use strict";
  if (window.AttnBookFigures) { return; }

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    Object.entries(attrs || {}).forEach(([k, v]) => node.setAttribute(k, v));
    if (text !== undefined) { node.textContent = text; }
    return node;
  }

  /* A number at 4 decimals; the package writes ±∞ (a masked score, the running max before any key) as
     "inf" and "-inf", which JSON has no number for, and an undefined value (0 / 0) as null. */
  function fmt(x) {
    if (x === null) { return "undefined"; }
    if (x === "inf" || x === "-inf") { return x === "inf" ? "∞" : "−∞"; }
    return Number(x).toFixed(4);
  }

  /* Background for a weight in [0, 1]: white to the book's blue; black or white text by the background's
     relative luminance, as attention_book.plotting.text_colour chooses (contrast 4.5:1 or more). */
  function shade(w) {
    const t = Math.max(0, Math.min(1, w));
    const rgb = [255 + (31 - 255) * t, 255 + (80 - 255) * t, 255 + (160 - 255) * t].map(Math.round);
    const linear = rgb.map((c) => { const x = c / 255; return x <= 0.04045 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4; });
    const luminance = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2];
    return { background: `rgb(${rgb.join(", ")})`, color: luminance > 0.179 ? "#000000" : "#ffffff" };
  }

  function readData(figure) {
    return JSON.parse(figure.querySelector("script[type='application/json']").textContent);
  }

  /* A row of buttons whose focus moves with the arrow keys (one Tab stop for the row). */
  function rovingRow(buttons, onMove) {
    buttons.forEach((button, i) => {
      button.tabIndex = i === 0 ? 0 : -1;
      button.addEventListener("keydown", (event) => {
        const step = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 }[event.key];
        let next = null;
        if (step) { next = (i + step + buttons.length) % buttons.length; }
        if (event.key === "Home") { next = 0; }
        if (event.key === "End") { next = buttons.length - 1; }
        if (next === null) { return; }
        event.preventDefault();
        buttons.forEach((b) => { b.tabIndex = -1; });
        buttons[next].tabIndex = 0;
        buttons[next].focus();
        if (onMove) { onMove(next); }
      });
    });
  }

  /* Attention explorer: query tokens; focus or hover one to see its weights over the keys. */
  function explorer(figure) {
    const data = readData(figure);
    const stage = figure.querySelector(".ab-stage");
    const live = figure.querySelector(".ab-live");
    const choose = el("select", { "aria-label": data.choice_label, class: "ab-select" });
    data.maps.forEach((map, i) => choose.appendChild(el("option", { value: String(i) }, map.name)));
    const label = el("label", {}, data.choice_label + ": ");
    label.appendChild(choose);
    const queries = el("div", { class: "ab-row", role: "group", "aria-label": "queries" });
    const keys = el("div", { class: "ab-row ab-keys", role: "group", "aria-label": "weights over the keys" });
    const queryButtons = data.queries.map((token, t) => {
      const button = el("button", { type: "button", class: "ab-token", "aria-pressed": "false",
        "data-query": String(t) }, token);
      queries.appendChild(button);
      return button;
    });
    const keyCells = data.keys.map((token, s) => {
      const cell = el("div", { class: "ab-key", "data-key": String(s) });
      cell.appendChild(el("span", { class: "ab-key-token" }, token));
      cell.appendChild(el("span", { class: "ab-weight" }, ""));
      keys.appendChild(cell);
      return cell;
    });
    stage.append(label, el("p", { class: "ab-caption" }, "query (focus, hover; Enter pins)"), queries,
      el("p", { class: "ab-caption" }, "its weights over the keys"), keys);

    let pinned = null, shown = 0;
    function show(t) {
      shown = t;
      const map = data.maps[Number(choose.value)];
      const row = map.weights[t];
      queryButtons.forEach((b, i) => b.classList.toggle("ab-current", i === t));
      keyCells.forEach((cell, s) => {
        const w = row[s];
        const colours = w === null ? { background: "transparent", color: "#767676" } : shade(w);
        cell.style.background = colours.background;
        cell.style.color = colours.color;
        cell.querySelector(".ab-weight").textContent = w === null ? "masked" : fmt(w);
        cell.dataset.weight = w === null ? "" : fmt(w);
      });
      live.textContent = `${map.name}, query ${t} "${data.queries[t]}": ` +
        data.keys.map((k, s) => `${k} ${row[s] === null ? "masked" : fmt(row[s])}`).join(", ");
    }
    function preview(t) { if (pinned === null) { show(t); } }
    queryButtons.forEach((button, t) => {
      button.addEventListener("focus", () => preview(t));
      button.addEventListener("mouseenter", () => preview(t));
      button.addEventListener("click", () => {
        pinned = pinned === t ? null : t;
        queryButtons.forEach((b, i) => b.setAttribute("aria-pressed", String(i === pinned)));
        show(t);
      });
    });
    rovingRow(queryButtons, (t) => { if (pinned === null) { show(t); } });
    choose.addEventListener("change", () => show(pinned === null ? shown : pinned));
    show(0);
  }

  /* Step-through shared by the KV cache and the tile schedule: Back / Next, and the step announced. */
  function stepper(figure, count, render) {
    const stage = figure.querySelector(".ab-stage");
    const live = figure.querySelector(".ab-live");
    const back = el("button", { type: "button", class: "ab-step", "data-step": "back" }, "◀ Back");
    const next = el("button", { type: "button", class: "ab-step", "data-step": "next" }, "Next ▶");
    const where = el("span", { class: "ab-where" });
    const controls = el("div", { class: "ab-controls" });
    controls.append(back, next, where);
    const body = el("div", { class: "ab-body" });
    stage.append(controls, body);
    let step = 0;
    function go(to) {
      step = Math.max(0, Math.min(count - 1, to));
      back.disabled = step === 0;
      next.disabled = step === count - 1;
      body.replaceChildren();
      const said = render(step, body);
      where.textContent = `step ${step + 1} of ${count}`;
      figure.dataset.step = String(step);
      live.textContent = `Step ${step + 1} of ${count}. ${said}`;
    }
    back.addEventListener("click", () => go(step - 1));
    next.addEventListener("click", () => go(step + 1));
    go(0);
  }

  function slotRow(title, slots, note) {
    const block = el("div", { class: "ab-cache" });
    block.appendChild(el("p", { class: "ab-caption" }, title));
    const row = el("div", { class: "ab-row" });
    slots.forEach((slot, i) => {
      const cell = el("div", { class: "ab-slot" + (slot.fresh ? " ab-fresh" : "") +
        (slot.text === "" ? " ab-empty" : ""), "data-slot": String(i) });
      cell.appendChild(el("span", { class: "ab-slot-index" }, slot.index));
      cell.appendChild(el("span", { class: "ab-slot-text" }, slot.text === "" ? "·" : slot.text));
      row.appendChild(cell);
    });
    block.appendChild(row);
    if (note) { block.appendChild(el("p", { class: "ab-note" }, note)); }
    return block;
  }

  /* KV cache: each step's contiguous cache, ring and paged block tables, as the package's caches hold them. */
  function kvCache(figure) {
    const data = readData(figure);
    stepper(figure, data.steps.length, (i, body) => {
      const s = data.steps[i];
      const mark = (held, fresh) => held.map((p, k) => ({ index: `slot ${k}`, text: p === null ? "" : `p${p}`,
        fresh: p !== null && fresh.includes(p) }));
      body.appendChild(el("p", { class: "ab-note" }, s.what));
      body.appendChild(slotRow(`full cache (${s.full.length} of ${data.max_length} positions)`,
        mark(s.full, s.new), ""));
      body.appendChild(slotRow(`ring of window ${data.window}`, mark(s.ring, s.new),
        s.ring_wrapped ? "the new position overwrote the oldest slot" : ""));
      const pool = s.pool.map((owner, b) => ({ index: `block ${b}`, text: owner === null ? "" : owner,
        fresh: false }));
      body.appendChild(slotRow(`paged pool of ${data.num_blocks} blocks of ${data.block_size}`, pool, ""));
      const tables = el("ul", { class: "ab-tables" });
      s.tables.forEach((table, b) => tables.appendChild(el("li", {},
        `sequence ${b} (length ${s.lengths[b]}): block table [${table.join(", ")}]`)));
      body.appendChild(tables);
      return `${s.what} Full cache holds ${s.full.length} positions; the ring holds ` +
        `${s.ring.filter((p) => p !== null).map((p) => "p" + p).join(", ")}; block tables ` +
        s.tables.map((t, b) => `sequence ${b}: ${t.join(", ")}`).join("; ") + ".";
    });
  }

  /* Online softmax over key tiles: the running max m, sum l and accumulator after each tile. */
  function tiles(figure) {
    const data = readData(figure);
    stepper(figure, data.steps.length, (i, body) => {
      const s = data.steps[i];
      const scores = data.scores.map((x, j) => ({ index: `k${j}`, text: fmt(x),
        fresh: j >= s.start && j < s.stop }));
      body.appendChild(slotRow(`scores of one query (tile ${i + 1}: keys ${s.start} to ${s.stop - 1})`,
        scores, ""));
      const table = el("table", { class: "ab-state" });
      const head = el("tr", {});
      ["", "after this tile"].forEach((h) => head.appendChild(el("th", { scope: "col" }, h)));
      table.appendChild(head);
      const rows = [["running max m", fmt(s.m)], ["running sum l", fmt(s.l)],
        ["accumulator acc", s.acc.map(fmt).join(", ")], ["acc / l", s.out.map(fmt).join(", ")]];
      rows.forEach(([name, value]) => {
        const tr = el("tr", {});
        tr.appendChild(el("th", { scope: "row" }, name));
        tr.appendChild(el("td", { "data-name": name }, value));
        table.appendChild(tr);
      });
      body.appendChild(table);
      const last = i === data.steps.length - 1;
      body.appendChild(el("p", { class: "ab-note" }, last ?
        `All tiles read: acc / l equals softmax(scores) · V = ${data.exact.map(fmt).join(", ")}.` :
        "acc / l so far is the attention output over the keys read; later tiles rescale it."));
      return `Keys ${s.start} to ${s.stop - 1}: m ${fmt(s.m)}, l ${fmt(s.l)}, acc / l ${s.out.map(fmt).join(", ")}.`;
    });
  }

  const KINDS = { explorer, "kv-cache": kvCache, tiles };
  window.AttnBookFigures = {
    start(figure) {
      if (figure.dataset.started) { return; }
      figure.dataset.started = "1";
      KINDS[figure.dataset.kind](figure);
      figure.querySelector(".ab-fallback").hidden = true;  // only once the figure is drawn
    },
  };
})();
