// The readable values of console/templatetags/forge_format.py: instants shown again in the browser's own time
// zone (a shortened hash's Copy button is console.js's). Served as a file (the console's policy runs no inline
// script); a watcher of the page, so values swapped in by the live refresh are shown so too.
(function () {
  function pad(number) { return String(number).padStart(2, "0"); }

  // `2026-12-03 08:46:09 +01:00`: the same shape the server writes, in the browser's zone.
  function secondText(date) {
    var minutes = -date.getTimezoneOffset();
    var sign = minutes < 0 ? "-" : "+";
    minutes = Math.abs(minutes);
    return date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()) + " " +
      pad(date.getHours()) + ":" + pad(date.getMinutes()) + ":" + pad(date.getSeconds()) + " " +
      sign + pad(Math.floor(minutes / 60)) + ":" + pad(minutes % 60);
  }

  function localize(root) {
    root.querySelectorAll("time.forge-time[datetime]:not([data-local])").forEach(function (element) {
      var date = new Date(element.getAttribute("datetime"));
      if (isNaN(date.getTime())) return;
      element.textContent = secondText(date);
      element.dataset.local = "yes";
    });
    // A time range typed into the filters is read in the browser's zone: say which one.
    var zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
    root.querySelectorAll("input[type=hidden].forge-time-zone").forEach(function (input) {
      if (!input.value) input.value = zone;
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    localize(document);
    new MutationObserver(function () { localize(document); })
      .observe(document.body, {childList: true, subtree: true});
  });
})();
