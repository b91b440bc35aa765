// Behaviour shared by every cockpit page, kept out of the markup so the Content-Security-Policy can
// forbid inline script (htmx runs with allowEval off: no trigger filters, no hx-on). Loaded once;
// it survives boosted navigation.
(function () {
  "use strict";

  // A component that shows its own refusals marks itself with data-swap-status="409 422": an
  // answer with one of those statuses is swapped in as a normal fragment (it carries the
  // message), not treated as an error.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var origin = event.target && event.target.closest ? event.target.closest("[data-swap-status]") : null;
    if (!origin) return;
    var statuses = origin.getAttribute("data-swap-status").split(/\s+/);
    if (statuses.indexOf(String(event.detail.xhr.status)) !== -1) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });

  // The run timeline asks for itself every few seconds and replaces itself with the answer.
  function cancelFormOpen(timeline) {
    return !!timeline.querySelector("details.cancel-run[open]");
  }

  // While the cancel confirmation is open, the timeline does not poll: the reason being typed is
  // never replaced. (htmx:confirm comes before every request htmx makes; cancelling it sends none.)
  document.addEventListener("htmx:confirm", function (event) {
    var elt = event.detail && event.detail.elt;
    if (elt && elt.id === "run-timeline" && cancelFormOpen(elt)) {
      event.preventDefault();
    }
  });

  // A poll already on its way when the form opens would still land and close the form: such an
  // answer is dropped. The form's own answer (the request comes from the form, not the timeline)
  // always lands.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var detail = event.detail;
    var target = detail.target;
    var from = detail.requestConfig && detail.requestConfig.elt; // the element that asked
    if (!target || target.id !== "run-timeline" || from !== target) return;
    if (cancelFormOpen(target)) {
      detail.shouldSwap = false;
    }
  });
})();

// The runs list: the header checkbox ticks (or clears) every run on the page.
(function () {
  "use strict";
  document.addEventListener("change", function (event) {
    var box = event.target;
    if (!box || !box.matches || !box.matches("input[data-pick-all]")) return;
    var group = box.getAttribute("data-pick-all");
    document.querySelectorAll('input[data-pick="' + group + '"]').forEach(function (item) {
      item.checked = box.checked;
    });
  });
})();

// The bar's menus ("More", and "Menu" on a narrow window) are <details>: they open and close
// without script. This only closes an open one on Escape (focus back on its summary) or on a click
// elsewhere, as a menu is expected to.
(function () {
  "use strict";
  var OPEN = "details.nav-more[open], details.nav-menu[open]";
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") return;
    document.querySelectorAll(OPEN).forEach(function (menu) {
      var inside = menu.contains(document.activeElement);
      menu.open = false;
      var summary = menu.querySelector("summary");
      if (inside && summary) summary.focus();
    });
  });
  document.addEventListener("click", function (event) {
    document.querySelectorAll(OPEN).forEach(function (menu) {
      if (!menu.contains(event.target)) menu.open = false;
    });
  });
})();
