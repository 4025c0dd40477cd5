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
  /* Linked hover: the hovered round lights up in the stream, the tree, the verify view and the charts whose
     x axis is the round (their figure's layout.meta.sv_x, specviz/charts.py); the panel that does not hold the
     pointer scrolls its own box (never the page) to show it. */
  function reveal(n, from) {
    for (var a = n.parentElement; a && a !== document.body; a = a.parentElement) {
      if (a.scrollHeight > a.clientHeight + 1 && /auto|scroll/.test(getComputedStyle(a).overflowY)) {
        if (from && a.contains(from)) return;
        var r = n.getBoundingClientRect(), b = a.getBoundingClientRect();
        if (r.top < b.top || r.bottom > b.bottom) a.scrollTop += r.top - b.top - 8;
        return;
      }
    }
  }
  function markCharts(round) {
    document.querySelectorAll(".js-plotly-plot").forEach(function (gd) {
      var fl = gd._fullLayout, xa = fl && fl.xaxis, ya = fl && fl.yaxis;
      if (!fl || !fl.meta || fl.meta.sv_x !== "round" || !xa || !xa.l2p || !ya) return;
      var a = xa.l2p(round - 0.5), b = xa.l2p(round + 0.5);
      var left = xa._offset + Math.min(a, b), w = Math.max(3, Math.abs(b - a));
      if (!isFinite(left) || left + w < xa._offset || left > xa._offset + xa._length) return;
      var m = el("div", "sv-chart-mark");
      m.setAttribute("data-round", String(round));
      m.style.left = left + "px"; m.style.width = w + "px";
      m.style.top = ya._offset + "px"; m.style.height = ya._length + "px";
      if (getComputedStyle(gd).position === "static") gd.style.position = "relative";
      gd.appendChild(m);
    });
  }
  function linked(round, on, from) {
    document.querySelectorAll(".specviz .is-linked").forEach(function (n) { n.classList.remove("is-linked"); });
    document.querySelectorAll(".sv-chart-mark").forEach(function (n) { n.remove(); });
    if (!on || round === undefined || round === null || round === "") return;
    document.querySelectorAll('[data-round="' + CSS.escape(String(round)) + '"]:is(.sv-round, .tree-round, .specviz-verify)')
      .forEach(function (n) { n.classList.add("is-linked"); reveal(n, from); });
    if (isFinite(Number(round))) markCharts(Number(round));
  }
  /* The tree's zoom: a CSS variable on the page root, so it survives the tree's re-renders; never below 1. */
  var ZOOMS = [1, 1.25, 1.5, 2], zoomAt = 0;
  function zoomTree(step) {
    zoomAt = Math.max(0, Math.min(ZOOMS.length - 1, zoomAt + step));
    document.documentElement.style.setProperty("--sv-tree-zoom", String(ZOOMS[zoomAt]));
  }
  function hookChart(gd) {  /* hovering a round in a chart links it back */
    if (gd.svHooked || typeof gd.on !== "function") return;
    gd.svHooked = true;
    gd.on("plotly_hover", function (ev) {
      var fl = gd._fullLayout, pt = ev && ev.points && ev.points[0];
      if (fl && fl.meta && fl.meta.sv_x === "round" && pt && !pinned) linked(pt.x, true, gd);
    });
    gd.on("plotly_unhover", function () { if (!pinned && !current) linked(null, false); });
  }
  function show(tok) {
    var d = tipData(tok);
    if (!d) return;
    ensureBox();
    if (current !== tok) {
      fill(tok, d);
      box.classList.toggle("dark", !!tok.closest(".dark") || document.body.classList.contains("dark"));
      current = tok;
      linked(tok.dataset.round, true, tok);
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
    var gd = e.target && e.target.closest ? e.target.closest(".js-plotly-plot") : null;
    if (gd) hookChart(gd);
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
      if (tok.closest("#stream")) revealVerify(tok.dataset.round);  /* the tree keeps its own tab */
      return;
    }
    var z = e.target && e.target.closest ? e.target.closest(".specviz [data-tree-zoom]") : null;
    if (z) { zoomTree(z.getAttribute("data-tree-zoom") === "in" ? 1 : -1); return; }
    var t = e.target && e.target.closest ? e.target.closest(".specviz [data-select-round]") : null;
    if (t) select(t.getAttribute("data-select-round"));
    if (pinned && !(box && box.contains(e.target))) hide();
  });
  function tokensOf(stream) {  /* the tokens on screen (compact mode and output-only hide some) */
    return Array.prototype.slice.call(stream.querySelectorAll(SEL)).filter(function (t) { return t.getClientRects().length; });
  }
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
    else if (e.key === "Enter" || e.key === " ") {
      /* the keyboard's token (a pointer resting over the page re-hovers whatever scrolls under it), its round in view */
      var act = toks.filter(function (t) { return t.classList.contains("is-active"); })[0] || current;
      if (act) { select(act.dataset.round); if (act.closest("#stream")) revealVerify(act.dataset.round); }
      e.preventDefault();
      return;
    }
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
    if (!current.isConnected) { hide(); return; }
    var r = current.getBoundingClientRect();
    if (r.bottom < 0 || r.top > window.innerHeight) hide(); else place(current);  /* never over other controls */
  }, true);

  function tabButton(name) {  /* the visible one: Gradio keeps invisible copies of the tab buttons to measure */
    var all = Array.prototype.filter.call(document.querySelectorAll('button[role="tab"], .overflow-dropdown button'),
                                          function (b) { return b.textContent.trim() === name; });
    return all.find(function (b) { return b.getBoundingClientRect().height >= 4; }) || all[0];
  }
  function openTab(name) {
    var b = tabButton(name);
    if (b && b.getAttribute("aria-selected") !== "true") { b.click(); return true; }
    return false;
  }
  function inView(n) {
    var r = n.getBoundingClientRect();
    return r.top >= 0 && r.bottom <= window.innerHeight;
  }
  /* Selecting a round opens the Verify tab and, once its view of that round has arrived, scrolls it into view. */
  function revealVerify(round) {
    openTab("Verify");
    var tries = 0;
    (function wait() {
      var v = document.querySelector('#verify .specviz-verify[data-round="' + round + '"]');
      if (v) { if (!inView(v)) v.scrollIntoView({ block: "nearest" }); return; }
      if (++tries < 40) setTimeout(wait, 100);
    })();
  }
  /* The tour's caption names an element (data-focus) and maybe its tab (data-tab): open the tab, outline the
     element while the caption is up and scroll it into the space above the caption, which assets/app.css pins to
     the viewport's bottom while a tour plays (the page gets that much room at its end, so the last element can
     rise above it too). */
  var tourSeen = "";
  function tourPlaying() { return !!document.querySelector('#tour .sv-tour[data-done="0"]'); }
  function tourRoom() {  /* the viewport's height above the pinned caption row */
    var row = tourPlaying() && document.querySelector(".sv-tour-row");
    return row ? Math.min(window.innerHeight, row.getBoundingClientRect().top) : window.innerHeight;
  }
  function showAboveCaption(n) {
    var r = n.getBoundingClientRect(), room = tourRoom(), margin = 8;
    if (r.top >= margin && r.bottom <= room - margin) return;
    var top = r.height <= room - 2 * margin ? Math.max(margin, (room - r.height) / 3) : margin;
    window.scrollBy(0, r.top - top);
  }
  function followTour() {
    var cap = document.querySelector("#tour .sv-tour");
    var key = cap ? cap.getAttribute("data-step") + "|" + (cap.getAttribute("data-focus") || "") : "";
    if (key === tourSeen) return;
    tourSeen = key;
    var playing = tourPlaying(), row = document.querySelector(".sv-tour-row");
    document.body.style.paddingBottom = playing && row ? row.getBoundingClientRect().height + 16 + "px" : "";
    var a = document.activeElement;  /* Replay and Skip trade places: the keyboard focus moves with them */
    if (a && a.closest && a.closest(playing ? "#tour-replay" : "#tour-skip")) {
      var other = document.querySelector(playing ? "#tour-skip" : "#tour-replay");
      if (other) other.focus({ preventScroll: true });
    }
    document.querySelectorAll(".sv-tour-focus").forEach(function (n) { n.classList.remove("sv-tour-focus"); });
    var focus = cap && cap.getAttribute("data-focus"), tab = cap && cap.getAttribute("data-tab");
    if (!focus) return;
    setTimeout(function () {  /* after Gradio's update of the page: a tab clicked inside it is undone */
      var opened = tab ? openTab(tab) : false;
      setTimeout(function () {
        var n = document.querySelector(focus);
        if (!n) return;
        n.classList.add("sv-tour-focus");
        if (row && playing) document.body.style.paddingBottom = row.getBoundingClientRect().height + 16 + "px";
        showAboveCaption(n);
      }, opened ? 300 : 50);
    }, 150);
  }
  /* The tour plays here, in the browser: its frames come with the page (ui/tour.py tour_data, in #sv-tour-frames),
     so touring costs the server nothing. A frame covers each view's own content (Gradio's node, hidden, never
     edited) with a layer of its HTML and sets the caption; the tour ending removes the layers, and the views show
     what Gradio holds: the recorded run the page opened on, or the visitor's own. It starts on page load (not with
     ?tour=0), on Replay; ?tour_speed=2 plays it twice as fast (1 to 8); Skip shows the hand-over caption; any other action of the visitor stops it, and so does a
     server update of a view it covers (a run, a trace loaded). */
  var TOUR_VIEWS = ["stream", "tree", "race", "explain", "summary", "verify"];
  var tour = null, tourData = null, tourAuto = !/[?&]tour=0(&|$)/.test(location.search);
  var tourSpeed = Math.min(8, Math.max(1, +((/[?&]tour_speed=([0-9.]+)/.exec(location.search) || [])[1]) || 1));
  function readTour() {
    if (tourData) return tourData;
    var n = document.getElementById("sv-tour-frames");
    try { tourData = n ? JSON.parse(n.getAttribute("data-frames")) : null; } catch (err) { tourData = null; }
    return tourData;
  }
  function viewBody(id) {  /* Gradio's node holding an HTML component's value */
    return document.querySelector("#" + id + " > .html-container > .prose:not(.sv-tour-layer)");
  }
  function setCaption(html) {  /* the caption's own node keeps its identity: attributes and children replaced */
    var cap = document.querySelector("#tour .sv-tour"), tmp = document.createElement("div");
    if (!cap) return;
    tmp.innerHTML = html;
    var src = tmp.querySelector(".sv-tour");
    if (!src) return;
    Array.prototype.slice.call(cap.attributes).forEach(function (a) { cap.removeAttribute(a.name); });
    Array.prototype.slice.call(src.attributes).forEach(function (a) { cap.setAttribute(a.name, a.value); });
    cap.innerHTML = src.innerHTML;
  }
  function showFrame(frame) {
    var d = readTour();
    TOUR_VIEWS.forEach(function (v) {
      if (!(v in frame.views)) return;
      var body = viewBody(v);
      if (!body) return;
      var layer = body.parentNode.querySelector(".sv-tour-layer");
      if (!layer) {
        layer = document.createElement("div");
        layer.className = body.className + " sv-tour-layer";
        body.parentNode.insertBefore(layer, body);
      }
      body.style.display = "none";
      layer.innerHTML = d.texts[frame.views[v]];
    });
    showRound(frame.round);
    setCaption(d.texts[frame.caption]);
  }
  /* The replay slider shows the frame's round (its value set, no event: the server is not asked); the tour's end
     puts back what it showed (it stayed at the last round while the caption said round 1). */
  var roundShown = null;
  function roundInputs() { return document.querySelectorAll("#round input[type=number], #round input[type=range]"); }
  function showRound(k) {
    if (k === undefined || k === null) return;
    var inputs = roundInputs();
    if (roundShown === null) roundShown = Array.prototype.map.call(inputs, function (n) { return n.value; });
    inputs.forEach(function (n) { n.value = String(k); });
  }
  function clearLayers() {
    document.querySelectorAll(".sv-tour-layer").forEach(function (n) { n.remove(); });
    TOUR_VIEWS.forEach(function (v) { var b = viewBody(v); if (b) b.style.display = ""; });
    if (roundShown !== null) {
      var was = roundShown; roundShown = null;
      roundInputs().forEach(function (n, i) { if (was[i] !== undefined) n.value = was[i]; });
    }
  }
  function setPrompt(box, text) { box.value = text; box.dispatchEvent(new Event("input", { bubbles: true })); }
  function endTour(handOver) {  /* handOver: the last frame's caption (Skip, the end); else the caption goes */
    var d = readTour();
    if (tour) {
      clearTimeout(tour.timer); tour.watch.disconnect();
      var box = document.querySelector("#prompt textarea");  /* a replay over the visitor's run: their prompt back */
      if (tour.prompt !== null && box && d && box.value === d.prompt) setPrompt(box, tour.prompt);
    }
    tour = null;
    clearLayers();
    if (handOver) raceAsTheTour();
    if (d) setCaption(handOver ? d.texts[d.frames[d.frames.length - 1].caption] : d.texts[d.empty]);
    if (handOver) setTimeout(function () {  /* the closing caption, no longer pinned, whole in view */
      var row = document.querySelector(".sv-tour-row");
      if (!row) return;
      var r = row.getBoundingClientRect();
      if (r.top < 0 || r.bottom > window.innerHeight) row.scrollIntoView({ block: r.height < window.innerHeight ? "center" : "start" });
    }, 200);
  }
  function startTour() {
    var d = readTour();
    if (!d) return false;
    if (tour) endTour(false);
    if (d.empty === undefined) {  /* the ended, empty caption the page opened with */
      var cap = document.querySelector("#tour .sv-tour");
      d.texts.push(cap ? cap.outerHTML : ""); d.empty = d.texts.length - 1;
    }
    /* a server update of a covered view (Gradio writes its own node) ends the tour: the update is the visitor's */
    var watch = new MutationObserver(function () { if (tour) endTour(false); });
    TOUR_VIEWS.forEach(function (v) {
      var b = viewBody(v);
      if (b) watch.observe(b, { childList: true, subtree: true, characterData: true });
    });
    tour = { i: 0, timer: null, watch: watch, prompt: null };
    var prompt = document.querySelector("#prompt textarea");  /* the recorded run's prompt, as Gradio's own value */
    if (prompt && prompt.value !== d.prompt) {
      tour.prompt = prompt.value;  /* the visitor's, given back when the tour ends on their own run */
      setPrompt(prompt, d.prompt);
    }
    (function next() {
      if (!tour) return;
      var frame = d.frames[tour.i];
      if (tour.i === d.frames.length - 1) { endTour(true); return; }
      showFrame(frame);
      tour.i += 1;
      tour.timer = setTimeout(next, frame.wait * 1000 / tourSpeed);
    })();
    return true;
  }
  /* Any user action stops the tour: a click or an edit of a control outside the tour's own row, the tab strip and
     the accordions' headers (those only show things); Skip and Replay are the tour's own. */
  var TOUR_CONTROLS = "button, input, textarea, select, [role=option], .tok, [data-select-round], .js-plotly-plot";
  var TOUR_NEUTRAL = ".sv-tour-row, [role=tab], .tab-wrapper, .overflow-dropdown, .label-wrap, #specviz-tipbox";
  function stopTourOn(e) {
    var t = e.target;
    if (!e.isTrusted || !t || !t.closest) return;
    if (e.type === "click" && t.closest("#tour-skip")) { if (tour) endTour(true); return; }
    if (e.type === "click" && t.closest("#tour-replay")) { tourAuto = false; startTour(); return; }
    if (!tour || !t.closest(TOUR_CONTROLS) || t.closest(TOUR_NEUTRAL)) return;
    endTour(false);
  }
  document.addEventListener("click", stopTourOn, true);
  document.addEventListener("input", stopTourOn, true);
  /* The ARIA tabs pattern: ←/→ move between the tabs of a tab strip (wrapping), Home and End to its first and
     last visible tab; the tab moved to is focused and opened. */
  document.addEventListener("keydown", function (e) {
    var tab = e.target && e.target.closest ? e.target.closest("[role=tab]") : null;
    var list = tab && tab.closest("[role=tablist]");
    if (!list || e.altKey || e.ctrlKey || e.metaKey) return;
    var tabs = Array.prototype.filter.call(list.querySelectorAll("[role=tab]"), function (b) {
      return b.getClientRects().length && !b.disabled;
    });
    var i = tabs.indexOf(tab), n = tabs.length, j = null;
    if (e.key === "ArrowRight") j = (i + 1) % n;
    else if (e.key === "ArrowLeft") j = (i - 1 + n) % n;
    else if (e.key === "Home") j = 0;
    else if (e.key === "End") j = n - 1;
    if (j === null || i < 0) return;
    e.preventDefault();
    tabs[j].focus();
    tabs[j].click();
  });
  /* Escape stops the tour as Skip does (the hand-over caption stays) */
  document.addEventListener("keydown", function (e) { if (e.key === "Escape" && tour) endTour(true); });
  /* The tour ends on its race: the visitor's first Generate after it races too (the race box turned on once),
     unless they set the box themselves; a programmatic click is not theirs (isTrusted), so it stops nothing. */
  var raceSet = false;
  document.addEventListener("change", function (e) {
    if (e.isTrusted && e.target && e.target.closest && e.target.closest("#race-on")) raceSet = true;
  }, true);
  function raceAsTheTour() {
    var box = document.querySelector("#race-on input[type=checkbox]");
    if (box && !box.checked && !raceSet) { raceSet = true; box.click(); }
  }
  function autoTour() { if (tourAuto && readTour() && startTour()) tourAuto = false; }
  /* Play steps the replay in the browser: each round shows after its measured wall time ÷ the speed (0.05..2 s, as
     the stream's data-round-s records it), by pressing Next ▶ (the server draws the round, as for a click); no
     server job waits meanwhile. Pause, the end of the run, or any other action of the visitor stops it. */
  var playing = null;
  function replayAt() {
    var n = document.querySelector("#round input[type=number]"), r = document.querySelector("#round input[type=range]");
    return { at: n ? +n.value : 0, last: r ? +r.max : 0 };
  }
  function stopPlay() { if (playing) { clearTimeout(playing); playing = null; } }
  /* One step: wait round at+1's time ÷ speed, press Next, then wait (up to 10 s) for the round to move; a Next
     that does not move it (the session's run is shorter than the slider says: it expired) ends Play. */
  function playStep() {
    var s = replayAt(), stream = document.querySelector("#stream .specviz-stream:not(.sv-empty)");
    if (!stream || s.at >= s.last) { stopPlay(); return; }
    var times = (stream.getAttribute("data-round-s") || "").split(",").map(Number);
    var speedBox = document.querySelector("#speed input");
    var speed = Math.max(+(speedBox && speedBox.value) || 1, 0.01);
    var wait = Math.min(2, Math.max(0.05, (times[s.at] || 0.1) / speed));  /* round at+1's time */
    playing = setTimeout(function () {
      var next = document.querySelector("#next");
      if (!playing || !next) return;
      next.click();
      var pressed = Date.now();
      (function moved() {
        if (!playing) return;
        if (replayAt().at !== s.at) { playStep(); return; }
        if (Date.now() - pressed > 10000) { stopPlay(); return; }
        playing = setTimeout(moved, 60);
      })();
    }, wait * 1000);
  }
  document.addEventListener("click", function (e) {
    var t = e.target && e.target.closest ? e.target : null;
    if (!t || !e.isTrusted) return;
    if (t.closest("#play")) {
      e.stopPropagation();
      stopPlay();
      if (replayAt().at >= replayAt().last) {  /* at the end: from the start, as the server's Play did */
        var range = document.querySelector("#round input[type=range]");
        if (range) { range.value = 0; range.dispatchEvent(new Event("input", { bubbles: true })); }
      }
      playing = setTimeout(playStep, 200);
      return;
    }
    if (playing && !t.closest("#speed, [role=tab], .tab-wrapper")) stopPlay();  /* Pause, or the visitor moves on */
  }, true);
  /* Explain's what-if panel: E(α, γ) / (γc + v(γ + 1)) redrawn at once as α, γ or c move. v(n) comes with the
     panel (data-v: the cost model's table of this run's measured verify costs); nothing goes to the server. */
  function expected(a, g) { return a >= 1 ? g + 1 : (1 - Math.pow(a, g + 1)) / (1 - a); }
  /* engine/figures.py's rule, the same steps: f of the inputs as printed reproduces the printed figure. fix is
     figures.fixed: the shortest decimal that reads back as x (String(x), as Python's repr), a tie rounded half up,
     away from zero, as a calculator rounds the decimal a reader sees (toFixed rounds the binary value: 2.275 → 2.27). */
  function fix(x, d) {
    d = Math.max(d, 0); x = +x;
    var s = String(x), t;
    if (!isFinite(x) || /e/i.test(s)) { t = x.toFixed(d); return +t === 0 ? (0).toFixed(d) : t; }
    var neg = s.charAt(0) === "-", parts = (neg ? s.slice(1) : s).split("."), ip = parts[0], fp = parts[1] || "";
    if (fp.length <= d) fp += new Array(d - fp.length + 1).join("0");
    else {
      var up = fp.charAt(d) >= "5";
      fp = fp.slice(0, d);
      if (up) {  /* one unit in the last kept place, carried through the digits */
        var digits = (ip + fp).split("").map(Number), i = digits.length - 1;
        while (i >= 0 && digits[i] === 9) { digits[i] = 0; i--; }
        if (i < 0) digits.unshift(1); else digits[i]++;
        var all = digits.join("");
        ip = all.slice(0, all.length - d); fp = all.slice(all.length - d);
      }
    }
    t = (neg ? "-" : "") + ip + (d > 0 ? "." + fp : "");
    return +t === 0 ? (0).toFixed(d) : t;
  }
  function tie(x, d) {  /* figures.tie: x's shortest decimal is exactly a tie at d decimals */
    var s = String(Math.abs(+x));
    if (/e/i.test(s)) return false;
    var f = s.split(".")[1] || "";
    return f.length === d + 1 && f.charAt(d) === "5";
  }
  function decs(t) { return t.indexOf(".") < 0 ? 0 : t.split(".")[1].length; }
  function derive(f, inputs, d) {  /* inputs: [value, least decimals]; returns [figure, [input texts]] */
    var want = fix(f.apply(null, inputs.map(function (x) { return x[0]; })), d), printed;
    for (var extra = 0; extra <= 6; extra++) {
      printed = inputs.map(function (x) { return fix(x[0], x[1] + extra); });
      var got = f.apply(null, printed.map(Number));
      if (fix(got, d) === want && (Math.abs(Math.abs(got) * Math.pow(10, d) % 1 - 0.5) > 1e-6 || tie(got, d))) return [want, printed];
    }
    return [fix(f.apply(null, printed.map(Number)), d), printed];
  }
  function oneRound(a, g, c, v) {  /* explain.one_round with α and c exact as printed (slider values) */
    var e0 = expected(a, g), k0 = g * c + v;
    var r = derive(function (x, y) { return x / y; }, [[e0, 2], [k0, 2]], 2);
    var e = fix(e0, decs(r[1][0])), kd = decs(r[1][1]);
    var cv = derive(function (x, y) { return g * x + y; }, [[c, 3], [v, 2]], kd)[1];
    var cost = fix(g * +cv[0] + +cv[1], kd), ratio = fix(+e / +cost, 2);
    return { e: e, c: cv[0], v: cv[1], cost: cost, ratio: ratio };
  }
  function drawWhatIf(panel) {
    /* a run on a GGUF's blocks offers its weights on fp32 too: v(n) at the roofline's floors (explain.fp32_curve) */
    var pick = panel.querySelector('select[name="weights"]'), fp32 = pick && pick.value === "fp32";
    var v = JSON.parse(panel.getAttribute(fp32 ? "data-v-fp32" : "data-v")), G = v.length - 2;
    var lo = !fp32 && panel.hasAttribute("data-v-lo") ? JSON.parse(panel.getAttribute("data-v-lo")) : null;
    var hi = lo ? JSON.parse(panel.getAttribute("data-v-hi")) : null, dc = +(panel.getAttribute("data-c-spread") || 0);
    var moved = panel.hasAttribute("data-moved");
    var val = function (n) { return +panel.querySelector('input[name="' + n + '"]').value; };
    /* until a slider moves: the run's exact α (its counts) and c, as Explain prints them */
    var a = moved ? val("alpha") : +panel.getAttribute("data-alpha"), g = val("gamma");
    var c = moved ? val("c") : +panel.getAttribute("data-c");
    if (moved) panel.querySelectorAll("label").forEach(function (l) {
      var i = l.querySelector("input"), o = l.querySelector("output");
      if (i && o) o.textContent = i.name === "gamma" ? i.value : (+i.value).toFixed(3);
    });
    var pts = [], band = [];
    for (var k = 1; k <= G; k++) {
      pts.push([k, expected(a, k) / (k * c + v[k + 1])]);
      if (lo) band.push([k, expected(a, k) / (k * c * (1 + dc) + hi[k + 1]), expected(a, k) / (k * c * (1 - dc) + lo[k + 1])]);
    }
    var runG = +panel.getAttribute("data-run-gamma"), runP = +panel.getAttribute("data-run-pred");
    var ys = pts.map(function (p) { return p[1]; }).concat(band.map(function (b) { return b[2]; }));
    var top = Math.max(2, runP, Math.max.apply(null, ys)) * 1.1;
    var W = 380, H = 190, L = 40, B = 30, T = 8, R = 10;
    var x = function (k) { return L + (W - L - R) * (k - 1) / (G - 1); };
    var y = function (s) { return H - B - (H - B - T) * s / top; };
    var out = [], step = top > 6 ? 2 : top > 3 ? 1 : 0.5;
    for (var t = 0; t <= top; t += step) {
      out.push('<line class="wf-grid" x1="' + L + '" y1="' + y(t) + '" x2="' + (W - R) + '" y2="' + y(t) + '"/>' +
               '<text class="wf-t" x="' + (L - 4) + '" y="' + (y(t) + 3) + '" text-anchor="end">' + t + '×</text>');
    }
    [1, 4, 8, 12, 16].forEach(function (k) {
      if (k <= G) out.push('<text class="wf-t" x="' + x(k) + '" y="' + (H - B + 13) + '" text-anchor="middle">' + k + '</text>');
    });
    if (band.length) out.push('<polygon class="wf-band" points="' + band.map(function (b) { return x(b[0]) + "," + y(b[2]); })
      .concat(band.slice().reverse().map(function (b) { return x(b[0]) + "," + y(b[1]); })).join(" ") +
      '"><title>the measured spread of c and v</title></polygon>');
    out.push('<line class="wf-one" x1="' + L + '" y1="' + y(1) + '" x2="' + (W - R) + '" y2="' + y(1) + '"/>');
    out.push('<polyline class="wf-curve' + (band.length ? ' wf-curve-noisy' : '') + '" points="' +
             pts.map(function (p) { return x(p[0]) + "," + y(p[1]); }).join(" ") + '"/>');
    if (band.length) out.push('<text class="wf-t wf-noisy-label" x="' + (L + 6) + '" y="' + (T + 12) +
                              '">⚠ timings disturbed: fitted curve, band = measured spread</text>');
    if (!fp32) out.push('<circle class="wf-run" cx="' + x(runG) + '" cy="' + y(runP) + '" r="6"><title>this run: ' + runP.toFixed(2) + '×</title></circle>');
    var s = pts[g - 1][1];
    out.push('<circle class="wf-pick" cx="' + x(g) + '" cy="' + y(s) + '" r="4"/>');
    out.push('<text class="wf-t" x="' + ((W + L) / 2) + '" y="' + (H - 3) + '" text-anchor="middle">γ (draft tokens per round)</text>');
    panel.querySelector(".wf-svg").innerHTML = out.join("");
    if (moved) {  /* the server printed the run's own line; a moved slider's line follows the same rule */
      var r = oneRound(a, g, c, v[g + 1]);
      var o = panel.querySelector(".wf-out");
      o.textContent = "At α = " + a.toFixed(3) + ", γ = " + g + ", c = " + r.c + ": E = " + r.e + " tokens ÷ (" + g +
                      "·" + r.c + " + v(" + (g + 1) + ") " + r.v + ") = " + r.cost + " steps → " + r.ratio + "×" +
                      (+r.ratio < 1 ? " (a slowdown)" : "") + (fp32 ? ", on fp32 weights (v at the roofline's floors)" : "");
      o.setAttribute("data-speedup", r.ratio);
    }
    panel.setAttribute("data-drawn", "1");
  }
  function whatIfMoved(e) {
    var panel = e.target && e.target.closest ? e.target.closest(".sv-whatif") : null;
    if (panel) { panel.setAttribute("data-moved", "1"); drawWhatIf(panel); }
  }
  document.addEventListener("input", whatIfMoved);
  document.addEventListener("change", whatIfMoved);  /* the weights' select */
  /* Tab out of an open dropdown closes its menu: Gradio's dropdown treats Tab as typing (it re-filters and keeps
     the menu open, even after the focus has left), so the Tab key never reaches it; the browser still moves the
     focus, and the dropdown's own blur closes the menu. */
  document.addEventListener("keydown", function (e) {
    var t = e.target;
    if (e.key === "Tab" && t && t.getAttribute && t.getAttribute("aria-expanded") !== null) e.stopPropagation();
  }, true);
  /* On a busy machine a dropdown's menu can open a moment after the focus has already moved on (its blur came
     first), and then nothing closes it: once the focus has left, a menu still open is closed as Escape would. */
  document.addEventListener("focusout", function (e) {
    var box = e.target;
    if (!box || !box.getAttribute || box.getAttribute("aria-expanded") === null) return;
    [150, 600, 1500].forEach(function (ms) {
      setTimeout(function () {
        if (document.activeElement !== box && box.getAttribute("aria-expanded") === "true")
          box.dispatchEvent(new KeyboardEvent("keydown", { key: "Escape", bubbles: true }));
      }, ms);
    });
  });
  /* After Generate the focus goes to the output (the stream), and stays there while the stream re-renders,
     until the user moves it. A run started from the keyboard (Enter on Generate: a click of detail 0) also keeps
     the focused output in view until that run's summary says done: a keyboard user has no pointer to follow it
     with, and the summary line growing above it pushed it below the fold. keyRun: the run before it, or null. */
  /* Any start (a mouse click too) brings the new run's output into view once, when its first tokens arrive;
     after that a pointer user scrolls freely. shownRun: the run before the click, or null once done. */
  var followOutput = false, keyRun = null, shownRun = null;
  function showNewOutput() {
    var s = document.querySelector("#stream .specviz-stream"), now = document.querySelector("#summary .sv-summary");
    if (shownRun === null || !s || !now || now.getAttribute("data-run") === shownRun || !s.querySelector(".tok")) return;
    shownRun = null;
    var r = s.getBoundingClientRect();
    if (r.top < 0 || r.top > window.innerHeight - 60) s.scrollIntoView({ block: "center" });
  }
  /* Once the run is done, its summary line (the speedup, the "recorded" note) is brought into view at every width:
     on a phone it sat 513 px above the output the page had scrolled to. summaryRun: the run before the click. */
  var summaryRun = null;
  function showSummary() {
    var now = document.querySelector('#summary .sv-summary[data-done="1"]');
    /* after the output's own scroll (showNewOutput: shownRun null), which would push the summary away again */
    if (summaryRun === null || shownRun !== null || !now || now.getAttribute("data-run") === summaryRun) return;
    summaryRun = null;
    var r = now.getBoundingClientRect();
    if (r.top < 0 || r.bottom > window.innerHeight) now.scrollIntoView({ block: "start" });
  }
  function focusOutput() {
    var s = document.querySelector("#stream .specviz-stream"), a = document.activeElement;
    showNewOutput();
    if (!followOutput || !s) return;
    if (s !== a) {
      if (a && a !== document.body && !(a.closest && a.closest("#generate"))) return;
      s.focus({ preventScroll: true });
    }
    if (keyRun === null) return;
    var r = s.getBoundingClientRect(), done = document.querySelector('#summary .sv-summary[data-done="1"]');
    if (r.top < 0 || r.bottom > window.innerHeight + 1) s.scrollIntoView({ block: "center" });
    if (done && done.getAttribute("data-run") !== keyRun) keyRun = null;
  }
  document.addEventListener("click", function (e) {
    if (e.target && e.target.closest && e.target.closest("#generate")) {
      var before = document.querySelector("#summary .sv-summary");
      followOutput = true;
      keyRun = e.detail === 0 ? ((before && before.getAttribute("data-run")) || "") : null;
      shownRun = (before && before.getAttribute("data-run")) || "";
      summaryRun = shownRun;
      setTimeout(focusOutput, 0);
    }
  }, true);
  document.addEventListener("focusin", function (e) {
    if (followOutput && !(e.target && e.target.closest && e.target.closest("#stream, #generate"))) followOutput = false;
  });
  /* Explain's derivation (a <details>) stays as the visitor left it while the run's updates redraw the panel */
  var derivationOpen = false;
  document.addEventListener("toggle", function (e) {
    if (e.target && e.target.classList && e.target.classList.contains("sv-derivation")) derivationOpen = e.target.open;
  }, true);
  function keepDerivation() {
    document.querySelectorAll("details.sv-derivation").forEach(function (d) { if (d.open !== derivationOpen) d.open = derivationOpen; });
  }
  function onPage() {
    keepDerivation();
    focusOutput();
    showSummary();
    autoTour();
    followTour();
    document.querySelectorAll('.sv-whatif:not([data-drawn])').forEach(drawWhatIf);
  }
  /* attributes too: Gradio may update a caption in place (its data-step changes, no node is added) */
  new MutationObserver(onPage).observe(document.body, { subtree: true, childList: true, attributes: true,
                                                        attributeFilter: ["data-step"] });

  /* Gradio's footer sits outside the scope its custom CSS reaches: its buttons get their 24 px here. */
  var unscoped = document.createElement("style");
  unscoped.textContent = "@media (max-width: 760px) { footer button, footer a { min-height: 24px; display: inline-flex; align-items: center; } }";
  document.head.appendChild(unscoped);
  document.documentElement.classList.add("specviz-js");
  autoTour();
  window.specviz = { installed: true, hide: hide, select: select, linked: linked, followTour: followTour, openTab: openTab,
                     startTour: startTour, endTour: endTour };
})();
