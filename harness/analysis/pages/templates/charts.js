// nvbench charts: every script element of class nvbench-figure holds one plotly.js figure (data, layout; a trace's
// meta.links: a URL per point, followed on click). A chart is drawn when its box comes near the window, so a page
// of a hundred charts opens at once, and a chart in a closed details element when it opens (plotly sizes a chart by its
// box, and a hidden box has none). nvbenchCharts.draw(id) draws one now.
(function () {
  "use strict";
  var figures = {};
  Array.prototype.forEach.call(document.querySelectorAll("script.nvbench-figure"), function (script) {
    figures[script.getAttribute("data-for")] = script;
  });
  function draw(id) {
    var box = document.getElementById(id), script = figures[id];
    if (!box || !script || box.getAttribute("data-drawn") || typeof Plotly === "undefined") { return null; }
    var figure = JSON.parse(script.textContent);
    box.setAttribute("data-drawn", "1");
    var config = Object.assign({ displaylogo: false, responsive: true }, figure.config || {});
    return Plotly.newPlot(box, figure.data, figure.layout, config).then(function () {
      box.setAttribute("data-ready", "1");
      box.on("plotly_click", function (event) {
        var point = event.points[0], links = point.data.meta && point.data.meta.links;
        var link = links ? links[point.pointIndex] : null;
        if (link) { window.location.href = link; }
      });
    });
  }
  window.nvbenchCharts = { draw: draw, ids: Object.keys(figures) };
  var boxes = Object.keys(figures).map(function (id) { return document.getElementById(id); }).filter(Boolean);
  if (!("IntersectionObserver" in window)) { boxes.forEach(function (box) { draw(box.id); }); return; }
  var seen = new IntersectionObserver(function (entries) {
    entries.forEach(function (entry) {
      if (entry.isIntersecting && entry.boundingClientRect.width > 0) { seen.unobserve(entry.target); draw(entry.target.id); }
    });
  }, { rootMargin: "400px 0px" });
  boxes.forEach(function (box) { seen.observe(box); });
})();
