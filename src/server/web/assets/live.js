// Keeps a part of the page fresh: every element with data-live="URL" has
// its contents replaced by what URL answers (HTML the service rendered and
// escaped), every two seconds while the page is visible.
(function () {
  function refresh() {
    if (document.hidden) return;
    document.querySelectorAll("[data-live]").forEach(function (el) {
      fetch(el.getAttribute("data-live"), { credentials: "same-origin" })
        .then(function (r) { if (r.ok) return r.text(); throw r.status; })
        .then(function (html) { el.innerHTML = html; })
        .catch(function () {});
    });
  }
  setInterval(refresh, 2000);
})();

// Follows a running command: an element with data-stream="URL" opens
// server-sent events there and appends each piece of output, as text, to
// #stdout or #stderr; the end replaces the "Running" line.
(function () {
  var el = document.querySelector("[data-stream]");
  if (!el || !window.EventSource) return;
  var source = new EventSource(el.getAttribute("data-stream"));
  function add(id, text) {
    var pre = document.getElementById(id);
    if (pre) pre.textContent += text;
  }
  source.addEventListener("out", function (e) { add("stdout", e.data); });
  source.addEventListener("err", function (e) { add("stderr", e.data); });
  source.addEventListener("gap", function (e) { add("stdout", "\n" + e.data + "\n"); });
  source.addEventListener("end", function (e) {
    document.getElementById("ended").textContent = "Ended: " + e.data;
    source.close();
  });
})();
