/* specviz: token tooltips, keyboard navigation and round selection, for HTML inserted at any time.
   One delegated listener set on document. A token (or tree node) carries its tooltip once, as JSON in
   data-tip; the floating box is built from it with textContent only (never innerHTML), so nothing in
   a trace can inject markup. The only global is window.specviz. */
(function () {
  "use strict";
  if (window.specviz && window.specviz.installed) return;
  var box = null, current = null, pinned = false;
  var SEL = ".specviz [data-tip]";

  function target(e) {
    var t = e.composedPath ? e.composedPath()[0] : e.target;
    if (t && t.nodeType !== 1) t = t.parentElement;
    return t && t.closest ? t.closest(SEL) : null;
  }
  function el(tag, cls, text) {
    var n = document.createElement(tag);
    if (cls) n.className = cls;
    if (text !== undefined && text !== null) n.textContent = String(text);
    return n;
  }
  function tipData(tok) {
    try { return JSON.parse(tok.getAttribute("data-tip") || "{}"); } catch (err) { return null; }
  }
  function row(parent, k, v) {
    var r = el("span", "tip-row");
    r.appendChild(el("span", "tip-l", k));
    r.appendChild(el("span", "tip-v", v));
    parent.appendChild(r);
  }
  function fill(tok, d) {
    var nodes = [el("span", "tip-head", d.h || "")];
    var rows = el("span", "tip-rows");
    if (tok.dataset.round !== undefined) row(rows, "round", tok.dataset.round);
    if (tok.dataset.pos !== undefined) row(rows, "position", tok.dataset.pos);
    (d.r || []).forEach(function (kv) { row(rows, kv[0], kv[1]); });
    nodes.push(rows);
    if (d.k && d.k.length) {
      var cols = el("span", "tip-cols");
      d.k.forEach(function (c) {
        var col = el("span", "tip-col");
        col.appendChild(el("span", "tip-ct", c[0]));
        (c[2] || []).forEach(function (item, i) {
          var k = el("span", "tip-k" + (i === c[1] ? " tip-chosen" : ""));
          k.appendChild(el("span", "tip-kt", item[0]));
          k.appendChild(el("span", "tip-kp", item[1] === null ? "–" : Number(item[1]).toFixed(3)));
          col.appendChild(k);
        });
        cols.appendChild(col);
      });
      nodes.push(cols);
    }
    box.replaceChildren.apply(box, nodes);
  }
  function ensureBox() {
    if (!box || !box.isConnected) {
      box = el("div", "specviz-tipbox");
      box.setAttribute("role", "tooltip");
      box.id = "specviz-tipbox";
      box.hidden = true;
      document.body.appendChild(box);
    }
    return box;
  }
  function place(tok) {
    var r = tok.getBoundingClientRect(), b = box.getBoundingClientRect();
    var vw = document.documentElement.clientWidth, vh = document.documentElement.clientHeight;
    var left = Math.max(4, Math.min(r.left, vw - b.width - 4));
    var top = r.bottom + 6;
    if (top + b.height > vh - 4) top = Math.max(4, r.top - b.height - 6);
    box.style.left = left + "px";
    box.style.top = top + "px";
  }
  function linked(round, on) {  /* hover a token: its round lights up in the stream, the tree and the verify view */
    document.querySelectorAll(".specviz .is-linked").forEach(function (n) { n.classList.remove("is-linked"); });
    if (!on || round === undefined) return;
    document.querySelectorAll('[data-round="' + round + '"]:is(.sv-round, .tree-round, .specviz-verify)')
      .forEach(function (n) { n.classList.add("is-linked"); });
  }
  function show(tok) {
    var d = tipData(tok);
    if (!d) return;
    ensureBox();
    if (current !== tok) {
      fill(tok, d);
      box.classList.toggle("dark", !!tok.closest(".dark") || document.body.classList.contains("dark"));
      current = tok;
      linked(tok.dataset.round, true);
    }
    box.hidden = false;
    place(tok);
  }
  function hide() {
    if (box) { box.hidden = true; box.classList.remove("is-pinned"); }
    if (current) linked(null, false);
    current = null;
    pinned = false;
  }
  /* Selecting a round (click or Enter on a token, a tree round, the verify view's round buttons) writes its
     number into the app's hidden #sv-select box, whose input event asks the server for that round's verify view. */
  function select(round) {
    var input = document.querySelector("#sv-select textarea, #sv-select input");
    if (!input || round === undefined || round === null) return;
    var setter = Object.getOwnPropertyDescriptor(Object.getPrototypeOf(input), "value").set;
    setter.call(input, String(round) + ":" + Date.now());  /* a fresh value, so selecting a round again fires */
    input.dispatchEvent(new Event("input", { bubbles: true }));
  }

  document.addEventListener("mouseover", function (e) {
    if (pinned) return;
    var tok = target(e);
    if (tok) show(tok); else if (current) hide();
  });
  document.addEventListener("mouseout", function (e) {
    if (pinned || !current) return;
    var to = e.relatedTarget;
    if (!to || !current.contains(to)) hide();
  });
  document.addEventListener("click", function (e) {  /* tap on touch screens, click on desktop: pin, and select */
    var tok = target(e);
    if (tok) {
      if (pinned && current === tok) { hide(); return; }
      current = null;
      show(tok);
      pinned = true;
      box.classList.add("is-pinned");
      select(tok.dataset.round);
      return;
    }
    var t = e.target && e.target.closest ? e.target.closest(".specviz [data-select-round]") : null;
    if (t) select(t.getAttribute("data-select-round"));
    if (pinned && !(box && box.contains(e.target))) hide();
  });
  function tokensOf(stream) { return Array.prototype.slice.call(stream.querySelectorAll(SEL)); }
  document.addEventListener("keydown", function (e) {
    if (e.key === "Escape") { hide(); return; }
    var stream = e.target && e.target.closest ? e.target.closest(".specviz-stream, .specviz-tree") : null;
    if (!stream || e.target !== stream) return;
    var toks = tokensOf(stream);
    if (!toks.length) return;
    var i = toks.indexOf(current);
    if (e.key === "ArrowRight" || e.key === "ArrowDown") i = Math.min(toks.length - 1, i + 1);
    else if (e.key === "ArrowLeft" || e.key === "ArrowUp") i = i < 0 ? toks.length - 1 : Math.max(0, i - 1);
    else if (e.key === "Home") i = 0;
    else if (e.key === "End") i = toks.length - 1;
    else if (e.key === "Enter" || e.key === " ") { if (current) select(current.dataset.round); e.preventDefault(); return; }
    else return;
    e.preventDefault();
    toks.forEach(function (t) { t.classList.remove("is-active"); });
    var tok = toks[i];
    tok.classList.add("is-active");
    tok.scrollIntoView({ block: "nearest", inline: "nearest" });
    pinned = false;
    current = null;
    show(tok);
    stream.setAttribute("aria-activedescendant", "");
    box.setAttribute("aria-live", "polite");
  });
  document.addEventListener("focusout", function (e) {
    if (!pinned && e.target && e.target.classList && e.target.classList.contains("specviz-stream")) hide();
  });
  window.addEventListener("scroll", function () {
    if (!current) return;
    if (!current.isConnected) hide(); else place(current);
  }, true);

  document.documentElement.classList.add("specviz-js");
  window.specviz = { installed: true, hide: hide, select: select };
})();
