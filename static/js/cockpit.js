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

// Disclosures (<details>) close on Escape: the bar's menus ("More", and "Menu" on a narrow window)
// wherever focus is, any other one when focus is inside it (Cancel run…), focus back on its
// summary. The bar's menus also close on a click elsewhere, as a menu is expected to.
(function () {
  "use strict";
  var MENUS = "details.nav-more[open], details.nav-menu[open]";
  function close(details) {
    var inside = details.contains(document.activeElement);
    details.open = false;
    var summary = details.querySelector("summary");
    if (inside && summary) summary.focus();
  }
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape" || event.defaultPrevented) return;
    var active = document.activeElement;
    var around = active && active.closest ? active.closest("details[open]") : null;
    if (around) {
      event.preventDefault();
      close(around);
    }
    document.querySelectorAll(MENUS).forEach(close);
  });
  document.addEventListener("click", function (event) {
    document.querySelectorAll(MENUS).forEach(function (menu) {
      if (!menu.contains(event.target)) menu.open = false;
    });
  });
})();

// Focus survives every swap. htmx itself puts focus back on an element with the same id; a
// control without one (a person's link, the "Cancel run" summary, a Continue button) is found
// again in the region's new content by what it is and its place among its like. A control whose
// request moves things may say where focus goes next (data-focus-next: ids, the first that is
// there and enabled wins), as moving a step in the builder does. When the control is gone, focus
// goes to the region's data-focus-home, else its first control: never to the page's <body>.
(function () {
  "use strict";
  var CONTROLS = 'a[href], button, input:not([type="hidden"]), select, textarea, summary, [tabindex]';
  var lost = null;

  function like(el) {
    return [el.tagName, el.getAttribute("href"), el.getAttribute("name"), el.getAttribute("value"),
      el.getAttribute("aria-label"), (el.textContent || "").replace(/\s+/g, " ").trim()].join("\u0001");
  }
  function usable(el) {
    return !!el && el.isConnected && !el.disabled && el.getClientRects().length > 0;
  }
  function nth(root, tag, key, n) {
    var all = root.querySelectorAll(tag);
    for (var i = 0; i < all.length; i++) {
      if (like(all[i]) === key) {
        if (n === 0) return all[i];
        n--;
      }
    }
    return null;
  }
  function placeOf(root, el) {
    var key = like(el), n = 0, all = root.querySelectorAll(el.tagName);
    for (var i = 0; i < all.length && all[i] !== el; i++) if (like(all[i]) === key) n++;
    return n;
  }

  function remember(event) {
    var detail = event.detail, target = detail.target, active = document.activeElement;
    if (detail.shouldSwap === false || !target || !target.id || target === document.body) return;
    if (!active || active === document.body || !target.contains(active)) return;
    var from = detail.requestConfig && detail.requestConfig.elt;
    var next = from && from.getAttribute ? from.getAttribute("data-focus-next") : null;
    lost = { el: active, region: target.id, tag: active.tagName, key: like(active), n: placeOf(target, active),
      next: active === from && next ? next.split(/\s+/) : [] };
  }
  document.addEventListener("htmx:beforeSwap", function (event) {
    lost = null;
    remember(event);
  });
  document.addEventListener("htmx:oobBeforeSwap", function (event) {
    if (!lost) remember(event);
  });

  document.addEventListener("htmx:afterSwap", function () {
    var was = lost;
    lost = null;
    if (!was) return;
    // htmx wires up swapped-in controls only when the content settles; a control given focus
    // now must already answer a key pressed at once, so its region is wired up here.
    var swapped = document.getElementById(was.region);
    if (swapped && window.htmx) window.htmx.process(swapped);
    for (var i = 0; i < was.next.length; i++) {
      var next = document.getElementById(was.next[i]);
      if (usable(next)) {
        next.focus();
        return;
      }
    }
    var active = document.activeElement;
    if (was.el.isConnected || (active && active !== document.body)) return; // still there, or htmx put it back
    var region = document.getElementById(was.region);
    if (!region) return;
    var again = nth(region, was.tag, was.key, was.n);
    if (usable(again)) {
      again.focus({ preventScroll: true });
      return;
    }
    var home = document.getElementById(region.getAttribute("data-focus-home") || "");
    if (home && home.isConnected) {
      home.focus();
      return;
    }
    var first = Array.prototype.filter.call(region.querySelectorAll(CONTROLS), usable)[0];
    if (first) first.focus();
  });
})();

// What a live part says when it changes. A polite status region outside the swapped content,
// marked data-announces="<id of the content>", speaks the content's data-announce-text whenever
// its data-announce-key changes (a run's state, the editor's verdict): once per change, never on
// every refresh, never on the page's first render.
(function () {
  "use strict";
  document.addEventListener("htmx:afterSettle", function () {
    document.querySelectorAll("[data-announces]").forEach(function (live) {
      var source = document.getElementById(live.getAttribute("data-announces"));
      if (!source) return;
      var key = source.getAttribute("data-announce-key") || "";
      if (key === live.getAttribute("data-said")) return;
      live.setAttribute("data-said", key);
      live.textContent = source.getAttribute("data-announce-text") || "";
    });
  });
})();

// A table that scrolls sideways inside its card (a narrow window) can be scrolled from the
// keyboard: while it overflows and holds no control of its own, it is a tab stop itself.
(function () {
  "use strict";
  var CONTROLS = 'a[href], button, input:not([type="hidden"]), select, textarea, summary, [tabindex]:not(.table-scroll)';
  function mark() {
    document.querySelectorAll(".table-scroll").forEach(function (box) {
      var needs = box.scrollWidth > box.clientWidth + 1 && !box.querySelector(CONTROLS);
      if (needs && !box.hasAttribute("tabindex")) box.setAttribute("tabindex", "0");
      else if (!needs && box.getAttribute("tabindex") === "0") box.removeAttribute("tabindex");
    });
  }
  var pending = null;
  window.addEventListener("resize", function () {
    window.clearTimeout(pending);
    pending = window.setTimeout(mark, 150);
  });
  document.addEventListener("htmx:afterSettle", mark);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", mark);
  else mark();
})();
