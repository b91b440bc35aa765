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
