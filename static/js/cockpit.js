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
