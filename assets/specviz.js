/* specviz: token tooltips on hover, focus and tap/click, for HTML inserted at any time.
   One delegated listener set on document; the hidden .tok-tip child of a token (or tree node) is
   cloned into a single floating box, so containers with overflow never clip it. The only global
   is window.specviz. Content is cloned DOM (already escaped by the renderer), never innerHTML. */
(function () {
  "use strict";
  if (window.specviz && window.specviz.installed) return;
  var box = null, current = null, pinned = false;

  function target(e) {
    var t = e.composedPath ? e.composedPath()[0] : e.target;
    if (t && t.nodeType !== 1) t = t.parentElement;
    return t && t.closest ? t.closest(".specviz .tok, .specviz .node") : null;
  }
  function tipOf(tok) {
    for (var c = tok.firstElementChild; c; c = c.nextElementSibling) {
      if (c.classList.contains("tok-tip")) return c;
    }
    return null;
  }
  function ensureBox() {
    if (!box || !box.isConnected) {
      box = document.createElement("div");
      box.className = "specviz-tipbox";
      box.setAttribute("role", "tooltip");
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
  function show(tok) {
    var tip = tipOf(tok);
    if (!tip) return;
    ensureBox();
    if (current !== tok) {
      box.replaceChildren.apply(box, Array.prototype.map.call(tip.childNodes, function (n) { return n.cloneNode(true); }));
      box.classList.toggle("dark", !!tok.closest(".dark"));
      current = tok;
    }
    box.hidden = false;
    place(tok);
  }
  function hide() {
    if (box) { box.hidden = true; box.classList.remove("is-pinned"); }
    current = null;
    pinned = false;
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
  document.addEventListener("click", function (e) {  /* tap on touch screens, click on desktop: pin */
    var tok = target(e);
    if (tok && tipOf(tok)) {
      if (pinned && current === tok) { hide(); return; }
      current = null;
      show(tok);
      pinned = true;
      box.classList.add("is-pinned");
    } else if (pinned && !(box && box.contains(e.target))) {
      hide();
    }
  });
  document.addEventListener("focusin", function (e) {
    var tok = target(e);
    if (tok && !pinned) show(tok);
  });
  document.addEventListener("focusout", function () { if (!pinned) hide(); });
  document.addEventListener("keydown", function (e) { if (e.key === "Escape") hide(); });
  window.addEventListener("scroll", function () {
    if (!current) return;
    if (!current.isConnected) hide(); else place(current);
  }, true);

  document.documentElement.classList.add("specviz-js");
  window.specviz = { installed: true, hide: hide };
})();
