// What every console page runs (templates/admin/base_site.html). Served as a file, never inline: the
// console's Content-Security-Policy allows scripts from its own origin only.

// Live console pages: when the server says what they show changed (a new access request or confirmation,
// a decision, a contract, a session, the switch, a working draft), fetch the page again and swap its
// content, so nobody has to reload. The pages that do are listed on this script's tag (data-live-pages).
(function () {
  var script = document.currentScript;
  var live = script && script.dataset.livePages ? script.dataset.livePages.split(" ") : [];
  if (live.indexOf(window.location.pathname) < 0 || !window.EventSource) return;
  var busy = false, again = false, catchingUp = false;
  function refresh() {
    // One fetch at a time; a change announced during a fetch is fetched again right after it.
    if (busy) { again = true; return; }
    busy = true;
    fetch(window.location.href, {credentials: "same-origin"})
      .then(function (response) { return response.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").querySelector("#content-main");
        var here = document.querySelector("#content-main");
        if (fresh && here) {
          keepTyped(here, fresh);
          var focused = here.contains(document.activeElement) ? document.activeElement : null;
          here.replaceWith(fresh);
          keepFocus(focused, fresh);
        }
      })
      .finally(function () {
        busy = false;
        if (again) { again = false; refresh(); return; }
        // The page says it is live once it has caught up with what changed while the feed was connecting, so
        // nothing swaps it under a reader (or a test) from that moment on unless something new happened.
        if (catchingUp) { catchingUp = false; document.documentElement.dataset.forgeLive = "open"; }
      });
  }
  // What a person is typing (a sentence, a memorable ID, a reason) survives the swap: each edited text field
  // is carried over to its twin in the fresh content (same form action, same name), focus included.
  function keepTyped(here, fresh) {
    var focused = document.activeElement;
    here.querySelectorAll("input[type=text], textarea").forEach(function (field) {
      if (field.value === field.defaultValue && field !== focused) return;
      var action = field.form ? field.form.getAttribute("action") : "";
      fresh.querySelectorAll("input[type=text], textarea").forEach(function (twin) {
        if (twin.name !== field.name || (twin.form ? twin.form.getAttribute("action") : "") !== action) return;
        twin.value = field.value;
        if (field === focused) setTimeout(function () { twin.focus(); }, 0);
      });
    });
  }
  // Keyboard focus survives the swap too: a link or button that had it hands it to its twin in the fresh
  // content (same tag, id, name, value, address and text), so a swap never throws a keyboard user back to
  // the top of the page. Text fields are keepTyped's.
  function keepFocus(focused, fresh) {
    if (!focused || focused.matches("input[type=text], textarea")) return;
    var key = focusKey(focused);
    var twin = Array.prototype.find.call(fresh.querySelectorAll(focused.tagName), function (candidate) {
      return focusKey(candidate) === key;
    });
    if (twin) twin.focus({preventScroll: true});
  }
  function focusKey(element) {
    return [element.tagName, element.id, element.getAttribute("name"), element.getAttribute("value"),
      element.getAttribute("href"), element.textContent.trim()].join("|");
  }
  // A countdown that ran out: the server expires what is due when the page is read, so read it again
  // (a moment later, so the server's clock has passed the deadline too).
  document.addEventListener("forge:countdown-ended", function () { setTimeout(refresh, 1500); });
  var source = new EventSource("/console/events");
  source.addEventListener("changed", refresh);
  // Whatever changed while the feed was (re)connecting was not announced: catch up once it is open.
  source.addEventListener("open", function () {
    catchingUp = true;
    refresh();
  });
})();

// Countdowns (a pending confirmation's time to decide): counted from the seconds left when the server
// rendered them, so the browser's clock does not matter; they survive the live swap above, since each
// tick looks them up afresh.
(function () {
  function tick() {
    document.querySelectorAll("time.countdown[data-countdown-seconds]").forEach(function (element) {
      if (!element.dataset.deadline) {
        element.dataset.deadline = String(Date.now() + 1000 * Number(element.dataset.countdownSeconds));
      }
      var left = Math.round((Number(element.dataset.deadline) - Date.now()) / 1000);
      if (left <= 0) {
        element.textContent = "expired";
        element.classList.add("expired");
        element.removeAttribute("data-countdown-seconds");
        document.dispatchEvent(new Event("forge:countdown-ended"));
        return;
      }
      element.textContent = Math.floor(left / 60) + ":" + String(left % 60).padStart(2, "0") + " left";
    });
  }
  setInterval(tick, 1000);
})();

// A button that asks before it submits (data-confirm holds the question), in place of an inline onclick.
document.addEventListener("click", function (event) {
  var button = event.target.closest && event.target.closest("button[data-confirm]");
  if (button && !window.confirm(button.dataset.confirm)) event.preventDefault();
});

// Copy buttons (a client configuration, an enrollment code, a token shown once): a button with class "copy"
// and data-copy naming the element whose text it copies. One listener on the document, so buttons the live
// swap above brings in copy too.
document.addEventListener("click", async function (event) {
  var button = event.target.closest && event.target.closest("button.copy[data-copy]");
  if (!button) return;
  var source = document.getElementById(button.dataset.copy);
  if (!source) return;
  try {
    await navigator.clipboard.writeText(source.textContent.trim());
    button.textContent = "Copied";
  } catch (refused) {
    // No clipboard outside a secure context (plain http on a non-loopback host): select the text for Ctrl+C.
    var range = document.createRange();
    range.selectNodeContents(source);
    window.getSelection().removeAllRanges();
    window.getSelection().addRange(range);
    button.textContent = "Selected: press Ctrl+C";
  }
  setTimeout(function () { button.textContent = "Copy"; }, 2000);
});
