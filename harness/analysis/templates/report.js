// nvbench report: click a column heading of a sortable table to sort by it (again: the other way).
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
  function sortBy(table, heading, column) {
    var body = table.tBodies[0];
    var descending = heading.getAttribute("aria-sort") === "ascending";
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) { h.removeAttribute("aria-sort"); });
    heading.setAttribute("aria-sort", descending ? "descending" : "ascending");
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a, column), y = key(b, column);
      if (x === null || y === null) { return (x === null) - (y === null); }
      return descending ? compare(y, x) : compare(x, y);
    });
    rows.forEach(function (row) { body.appendChild(row); });
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (heading, column) {
      heading.addEventListener("click", function () { sortBy(table, heading, column); });
    });
  });
})();
