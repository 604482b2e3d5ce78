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
