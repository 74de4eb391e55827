// nvbench report: click a column heading of a sortable table to sort by it (again: the other way); click a
// cell's row to open its detail row; a heatmap tile's link opens the row (or the skip group) it points at.
// Cells carry data-sort: a number sorts as a number, text as text, an empty key always last.
(function () {
  "use strict";
  function key(row, column) {
    var raw = row.cells[column].getAttribute("data-sort");
    if (raw === null || raw === "") { return null; }
    var number = Number(raw);
    return isNaN(number) ? raw : number;
  }
  function compare(a, b) {
    if (typeof a === "number" && typeof b === "number") { return a - b; }
    return String(a).localeCompare(String(b));
  }
  // A table whose cells are tbody groups (a main row and its detail row) sorts the groups by their first row.
  function items(table) {
    if (table.tBodies.length > 1 || table.classList.contains("cells")) {
      return { parent: table, list: Array.prototype.slice.call(table.tBodies), row: function (b) { return b.rows[0]; } };
    }
    var body = table.tBodies[0];
    return { parent: body, list: Array.prototype.slice.call(body.rows), row: function (r) { return r; } };
  }
  function sortBy(table, heading, column) {
    var descending = heading.getAttribute("aria-sort") === "ascending";
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) { h.removeAttribute("aria-sort"); });
    heading.setAttribute("aria-sort", descending ? "descending" : "ascending");
    var found = items(table);
    found.list.sort(function (a, b) {
      var x = key(found.row(a), column), y = key(found.row(b), column);
      if (x === null || y === null) { return (x === null) - (y === null); }
      return descending ? compare(y, x) : compare(x, y);
    });
    found.list.forEach(function (item) { found.parent.appendChild(item); });
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (heading, column) {
      heading.addEventListener("click", function () { sortBy(table, heading, column); });
    });
  });
  function toggle(group, open) {
    var detail = group.querySelector("tr.detail"), button = group.querySelector("button.more");
    if (!detail) { return; }
    var show = open === undefined ? detail.hidden : open;
    detail.hidden = !show;
    group.classList.toggle("open", show);
    if (button) { button.setAttribute("aria-expanded", show ? "true" : "false"); }
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.cells tbody.cell"), function (group) {
    group.rows[0].addEventListener("click", function (event) {
      if (event.target.closest("a")) { return; }
      toggle(group);
    });
  });
  function openTarget() {
    var id = decodeURIComponent(window.location.hash.slice(1));
    var target = id ? document.getElementById(id) : null;
    if (!target) { return; }
    if (target.tagName === "TBODY") { toggle(target, true); }
    if (target.tagName === "DETAILS") { target.open = true; }
  }
  window.addEventListener("hashchange", openTarget);
  openTarget();
})();
