/* Searchable pickers of the step builder (a combobox and its listbox) and Enter in builder fields.
   The server renders the options (htmx); this only moves the highlight, chooses and closes.
   Keys in the search box: ArrowDown/ArrowUp move, Enter chooses, Escape closes (twice: clears).
   Choosing writes the option's id into the picker's hidden input and fires "picked" on it, which
   htmx turns into the builder change. Loaded once; safe to load again after boosted navigation. */
(function () {
  "use strict";
  if (window.cockpitPicker) return;

  function rootOf(el) { return el && el.closest ? el.closest("[data-picker]") : null; }
  function listOf(root) { return root.querySelector('[role="listbox"]'); }
  function searchOf(root) { return root.querySelector(".picker-search"); }
  function options(root) { return Array.prototype.slice.call(listOf(root).querySelectorAll('[role="option"]')); }

  function open(root, yes) {
    var list = listOf(root), search = searchOf(root);
    list.hidden = !yes;
    search.setAttribute("aria-expanded", yes ? "true" : "false");
    if (!yes) search.removeAttribute("aria-activedescendant");
  }

  function highlight(root, index) {
    var all = options(root);
    if (!all.length) return;
    index = (index + all.length) % all.length;
    all.forEach(function (o, i) {
      o.setAttribute("aria-selected", i === index ? "true" : "false");
      o.classList.toggle("active", i === index);
    });
    searchOf(root).setAttribute("aria-activedescendant", all[index].id);
    all[index].scrollIntoView({ block: "nearest" });
  }

  function current(root) {
    var all = options(root);
    for (var i = 0; i < all.length; i++) if (all[i].getAttribute("aria-selected") === "true") return i;
    return -1;
  }

  function choose(root, option) {
    var hidden = root.querySelector("[data-picker-value]");
    hidden.value = option.getAttribute("data-value");
    open(root, false);
    window.htmx.trigger(hidden, "picked");
  }

  document.addEventListener("keydown", function (event) {
    var target = event.target;
    var root = rootOf(target);
    if (root && target.classList.contains("picker-search")) {
      var list = listOf(root);
      if (event.key === "ArrowDown" || event.key === "ArrowUp") {
        event.preventDefault();
        if (list.hidden || !options(root).length) {
          window.htmx.trigger(target, "picker-open");
          return;
        }
        highlight(root, current(root) + (event.key === "ArrowDown" ? 1 : -1));
      } else if (event.key === "Enter") {
        event.preventDefault();
        var all = options(root), at = current(root);
        if (!list.hidden && all.length) choose(root, all[at >= 0 ? at : 0]);
      } else if (event.key === "Escape") {
        event.preventDefault();
        if (!list.hidden) open(root, false);
        else target.value = "";
      }
      return;
    }
    // Enter in another builder field applies it (there is no form to submit).
    if (event.key === "Enter" && target.hasAttribute && target.hasAttribute("data-builder-field") &&
        target.tagName === "INPUT") {
      event.preventDefault();
      window.htmx.trigger(target, "change");
    }
  });

  document.addEventListener("click", function (event) {
    var option = event.target.closest ? event.target.closest('[role="option"].picker-option') : null;
    if (option && rootOf(option)) {
      event.preventDefault();
      choose(rootOf(option), option);
    }
  });

  // Options arrived (a first page into the list, or a next page in place of "More"): give every
  // option an id, show the list, highlight the first when nothing is.
  document.addEventListener("htmx:afterSettle", function () {
    document.querySelectorAll("[data-picker]").forEach(function (root) {
      var list = listOf(root);
      var all = options(root);
      all.forEach(function (o, i) { o.id = list.id + "-" + i; });
      if (list.children.length && list.hidden && document.activeElement === searchOf(root)) open(root, true);
      if (all.length && current(root) < 0 && !list.hidden) highlight(root, 0);
    });
  });

  // Leaving a picker closes its list.
  document.addEventListener("focusout", function (event) {
    var root = rootOf(event.target);
    if (!root) return;
    var next = event.relatedTarget;
    if (next && root.contains(next)) return;
    window.setTimeout(function () { if (!root.contains(document.activeElement)) open(root, false); }, 150);
  });

  window.cockpitPicker = { choose: choose };
})();
