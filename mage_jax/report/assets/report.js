// The report's only script (no inline scripts: the pages' CSP forbids them). It reads the DOM's
// text and data attributes only, and never writes HTML, so page text can never become markup.
"use strict";
(function () {
  var errors = [];
  window.addEventListener("error", function (e) {
    errors.push(String(e.message || e.type) + " @ " + String(e.filename || "") + ":" + String(e.lineno || ""));
  });
  window.addEventListener("unhandledrejection", function (e) { errors.push("unhandled rejection: " + String(e.reason)); });

  function cellValue(row, i, type) {
    var cell = row.cells[i];
    var v = cell.hasAttribute("data-v") ? cell.getAttribute("data-v") : cell.textContent;
    return type === "num" ? parseFloat(v) || 0 : v.toLowerCase();
  }

  function makeSortable(table) {
    var heads = table.tHead ? table.tHead.rows[0].cells : [];
    Array.prototype.forEach.call(heads, function (th, i) {
      th.addEventListener("click", function () {
        var asc = !th.classList.contains("asc");
        Array.prototype.forEach.call(heads, function (h) { h.classList.remove("asc", "desc"); });
        th.classList.add(asc ? "asc" : "desc");
        var type = th.getAttribute("data-type"), body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = cellValue(a, i, type), y = cellValue(b, i, type);
          return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  }

  function wireFilters() {
    var table = document.getElementById("episodes");
    if (!table) return;
    var text = document.getElementById("f-text"), outcome = document.getElementById("f-outcome");
    var steps = document.getElementById("f-steps"), reward = document.getElementById("f-reward");
    var count = document.getElementById("f-count");
    function apply() {
      var q = text.value.toLowerCase(), o = outcome.value, s = parseFloat(steps.value) || 0;
      var r = reward.value === "" ? -Infinity : parseFloat(reward.value), shown = 0;
      Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
        var ok = (!q || row.textContent.toLowerCase().indexOf(q) >= 0) &&
                 (!o || row.getAttribute("data-outcome") === o) &&
                 parseFloat(row.getAttribute("data-steps")) >= s &&
                 parseFloat(row.getAttribute("data-reward")) >= r;
        row.hidden = !ok;
        if (ok) shown++;
      });
      count.textContent = shown + " of " + table.tBodies[0].rows.length + " shown";
    }
    [text, outcome, steps, reward].forEach(function (el) { el.addEventListener("input", apply); });
    apply();
  }

  // Where each marker is drawn, read back from the layout in screenshot pixels (checked by tests).
  function markerPositions() {
    Array.prototype.forEach.call(document.querySelectorAll("figure.shot"), function (fig) {
      var img = fig.querySelector("img"), marker = fig.querySelector(".marker");
      if (!img || !marker) return;
      var ir = img.getBoundingClientRect(), mr = marker.getBoundingClientRect();
      if (!ir.width || !ir.height) return;
      var sx = parseFloat(fig.getAttribute("data-screen-w")) / ir.width;
      var sy = parseFloat(fig.getAttribute("data-screen-h")) / ir.height;
      var x = ((mr.left + mr.right) / 2 - ir.left) * sx, y = ((mr.top + mr.bottom) / 2 - ir.top) * sy;
      fig.setAttribute("data-marker-drawn", x.toFixed(1) + "," + y.toFixed(1));
    });
  }

  function whenImagesLoaded(done) {
    var imgs = Array.prototype.filter.call(document.images, function (i) { return !i.complete; });
    var left = imgs.length;
    if (!left) return done();
    imgs.forEach(function (i) {
      var one = function () { if (--left === 0) done(); };
      i.addEventListener("load", one); i.addEventListener("error", one);
    });
  }

  window.addEventListener("load", function () {
    try {
      Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), makeSortable);
      wireFilters();
    } catch (e) { errors.push(String(e)); }
    whenImagesLoaded(function () {
      try { markerPositions(); } catch (e) { errors.push(String(e)); }
      var status = document.getElementById("js-status");
      status.setAttribute("data-pwned", String(window.__pwned));
      status.setAttribute("data-errors", errors.join(" | "));
      status.setAttribute("data-ready", "1");
    });
  });
})();
