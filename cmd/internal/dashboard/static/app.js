// pelwarden dashboard: the few behaviours htmx does not cover. No inline
// script anywhere (the Content-Security-Policy forbids it).
(function () {
  "use strict";
  function selection() {
    return Array.prototype.slice.call(document.querySelectorAll('#selection input[name="id"]'));
  }
  function showCount() {
    var out = document.getElementById("selected-count");
    if (!out) return;
    var n = selection().filter(function (c) { return c.checked; }).length;
    out.textContent = n === 0 ? "" : n + " selected";
  }
  document.addEventListener("change", function (e) {
    var t = e.target;
    if (t && t.id === "select-all") {
      selection().forEach(function (c) { c.checked = t.checked; });
    }
    showCount();
  });
  // Cancel in a confirmation shown in place: close it, no reload.
  document.addEventListener("click", function (e) {
    var t = e.target;
    if (t && t.id === "cancel" && t.closest("#dialog")) {
      e.preventDefault();
      document.getElementById("dialog").innerHTML = "";
    }
  });
})();
