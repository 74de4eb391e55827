// nvbench dashboard: the filters. A tile and its trend stay shown when every chosen axis value (and state) matches
// their data attributes; the count says how many remain.
(function () {
  "use strict";
  var selects = Array.prototype.slice.call(document.querySelectorAll("#filters select"));
  function attribute(axis) { return "data-" + axis.replace(/_/g, "-"); }
  function apply() {
    var chosen = selects.filter(function (s) { return s.value !== ""; });
    var tiles = document.querySelectorAll(".grid .dtile"), shown = 0;
    Array.prototype.forEach.call(document.querySelectorAll(".grid .dtile, #trends article.cell"), function (el) {
      var keep = chosen.every(function (s) { return el.getAttribute(attribute(s.getAttribute("data-axis"))) === s.value; });
      el.hidden = !keep;
      if (keep && el.classList.contains("dtile")) { shown += 1; }
    });
    var count = document.getElementById("shown");
    if (count) { count.textContent = shown + " of " + tiles.length + " cells shown"; }
  }
  selects.forEach(function (s) { s.addEventListener("change", apply); });
  apply();
})();
