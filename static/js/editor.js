/* The definition editor: line numbers beside the text, and "go to line" for the listed issues.
   Safe to load more than once (htmx re-runs it after a boosted navigation). */
(function () {
  "use strict";
  if (window.cockpitEditor) {
    window.cockpitEditor.init(document);
    return;
  }

  function lineHeight(textarea) {
    var value = parseFloat(window.getComputedStyle(textarea).lineHeight);
    return isNaN(value) ? 18 : value;
  }

  function badLines(textarea) {
    var lines = new Set();
    document.querySelectorAll('a.goto-line[data-textarea="' + textarea.id + '"]').forEach(function (link) {
      lines.add(link.dataset.line);
    });
    return lines;
  }

  function renderGutter(textarea) {
    var gutter = document.getElementById(textarea.dataset.gutter);
    if (!gutter) return;
    var count = textarea.value.split("\n").length;
    var bad = badLines(textarea);
    var parts = [];
    for (var i = 1; i <= count; i++) {
      parts.push(bad.has(String(i)) ? '<span class="bad" data-testid="error-line">' + i + "</span>" : String(i));
    }
    gutter.innerHTML = parts.join("\n") + "\n";
    gutter.scrollTop = textarea.scrollTop;
  }

  function gotoLine(textarea, line) {
    var lines = textarea.value.split("\n");
    line = Math.max(1, Math.min(line || 1, lines.length));
    var start = 0;
    for (var i = 0; i < line - 1; i++) start += lines[i].length + 1;
    textarea.focus();
    textarea.setSelectionRange(start, start + lines[line - 1].length);
    textarea.scrollTop = Math.max(0, (line - 1) * lineHeight(textarea) - textarea.clientHeight / 3);
    var gutter = document.getElementById(textarea.dataset.gutter || "");
    if (gutter) gutter.scrollTop = textarea.scrollTop;
  }

  // The text is marked invalid exactly when the validation's verdict says so (the verdict is
  // announced once per change by the page's status region, see cockpit.js).
  function markVerdict() {
    var feedback = document.getElementById("editor-feedback");
    if (!feedback) return;
    document.querySelectorAll('textarea[aria-describedby~="editor-feedback"]').forEach(function (textarea) {
      if (feedback.getAttribute("data-announce-key") === "invalid") textarea.setAttribute("aria-invalid", "true");
      else textarea.removeAttribute("aria-invalid");
    });
  }

  function init(root) {
    markVerdict();
    root.querySelectorAll("textarea[data-gutter]").forEach(function (textarea) {
      if (!textarea.dataset.ready) {
        textarea.dataset.ready = "1";
        textarea.addEventListener("input", function () { renderGutter(textarea); });
        textarea.addEventListener("scroll", function () {
          var gutter = document.getElementById(textarea.dataset.gutter);
          if (gutter) gutter.scrollTop = textarea.scrollTop;
        });
      }
      renderGutter(textarea);
    });
  }

  // "field" beside an issue: focus the builder control it is about.
  document.addEventListener("click", function (event) {
    var link = event.target.closest ? event.target.closest("a.goto-field") : null;
    if (!link) return;
    var target = document.getElementById(link.dataset.field);
    if (!target) return;
    event.preventDefault();
    target.scrollIntoView({ block: "center" });
    target.focus();
  });

  document.addEventListener("click", function (event) {
    var link = event.target.closest ? event.target.closest("a.goto-line") : null;
    if (!link) return;
    var textarea = document.getElementById(link.dataset.textarea);
    if (!textarea) return;
    event.preventDefault();
    gotoLine(textarea, parseInt(link.dataset.line, 10));
  });
  // New issues arrived: mark their lines in the gutter.
  document.addEventListener("htmx:afterSettle", function () { init(document); });

  window.cockpitEditor = { init: init, gotoLine: gotoLine };
  init(document);
})();
