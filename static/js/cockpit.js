// Behaviour shared by every page, kept out of the markup so the Content-Security-Policy can
// forbid inline script.
//
// A component that shows its own refusals marks itself with data-swap-status="409 422": an
// answer with one of those statuses is swapped in as a normal fragment (it carries the
// message), not treated as an error.
document.addEventListener("htmx:beforeSwap", function (event) {
  var origin = event.target && event.target.closest ? event.target.closest("[data-swap-status]") : null;
  if (!origin) {
    return;
  }
  var statuses = origin.getAttribute("data-swap-status").split(/\s+/);
  if (statuses.indexOf(String(event.detail.xhr.status)) !== -1) {
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  }
});

// Behaviour shared by every cockpit page (loaded once; it survives boosted navigation).
(function () {
  "use strict";

  // The run timeline asks for itself every few seconds and replaces itself with the answer. Its
  // trigger pauses while the cancel confirmation is open, but a poll already on its way when the
  // form opens would still land and close the form, losing the reason being typed. Such an answer
  // is dropped: the timeline's own polls never replace an open form. The form's own answer (the
  // request comes from the form, not the timeline) always lands.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var detail = event.detail;
    var target = detail.target;
    var from = detail.requestConfig && detail.requestConfig.elt; // the element that asked
    if (!target || target.id !== "run-timeline" || from !== target) return;
    if (target.querySelector("details.cancel-run[open]")) {
      detail.shouldSwap = false;
    }
  });
})();
