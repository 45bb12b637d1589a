// A working draft under review (templates/admin/drafts/review.html): the page is not swapped while it is
// read; when the draft moves, the notice #draft-moved says so.
(function () {
  if (!window.EventSource) return;
  function check() {
    fetch(window.location.href, {credentials: "same-origin"})
      .then(function (response) { return response.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").querySelector("#draft-summary");
        var here = document.querySelector("#draft-summary");
        var notice = document.querySelector("#draft-moved");
        if (!notice || !here) return;
        var now = fresh ? fresh.dataset.workingRevision : "";
        if (now === here.dataset.workingRevision) return;
        notice.hidden = false;
        notice.querySelector(".revision").textContent = now ? "working revision " + now : "a new state";
      });
  }
  var source = new EventSource("/console/events");
  source.addEventListener("changed", check);
  source.addEventListener("open", function () {
    document.documentElement.dataset.forgeLive = "open";
    check();
  });
})();
