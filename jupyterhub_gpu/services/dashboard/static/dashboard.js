// The GPU dashboard's live updates: every few seconds the server renders the live part
// again (GET live, HTML escaped on the server) and it replaces the old one. Nothing else:
// no data is turned into HTML here. A form an admin is filling in is never pulled away.
// Every <time datetime> (UTC from the server) is shown in the browser's own time zone.
(function () {
  "use strict";
  function localize(where) {
    var times = where.querySelectorAll("time[datetime]");
    for (var i = 0; i < times.length; i++) {
      var when = new Date(times[i].getAttribute("datetime"));
      if (isNaN(when.getTime())) { continue; }
      var today = when.toDateString() === new Date().toDateString();
      var opts = {hour: "2-digit", minute: "2-digit", timeZoneName: "short"};
      if (!today) { opts.weekday = "short"; opts.day = "numeric"; opts.month = "short"; }
      times[i].textContent = when.toLocaleString([], opts);
      times[i].title = when.toString();
    }
  }
  localize(document);
  var root = document.getElementById("jhgpu-dashboard");
  var live = document.getElementById("jhgpu-live");
  var banner = document.getElementById("jhgpu-connection");
  if (!root || !live || !window.fetch) { return; }
  var url = root.getAttribute("data-live-url");
  var interval = Math.max(parseFloat(root.getAttribute("data-interval")) || 5, 1) * 1000;
  var xsrf = root.getAttribute("data-xsrf") || "";
  var busy = false;
  var failures = 0;
  var refreshes = 0;

  function editing() {
    var active = document.activeElement;
    if (active && live.contains(active) && /^(INPUT|TEXTAREA|SELECT|BUTTON)$/.test(active.tagName)) {
      return true;
    }
    return live.querySelector("details.jhgpu-action[open]") !== null;
  }

  function show(message) {
    if (!banner) { return; }
    banner.textContent = message;
    banner.hidden = !message;
  }

  function refresh() {
    if (busy || document.hidden || editing()) { return; }
    busy = true;
    fetch(url, {
      credentials: "same-origin",
      cache: "no-store",
      headers: { "X-XSRFToken": xsrf, "Accept": "text/html" }
    }).then(function (response) {
      if (response.status === 403) {
        show("Your login has expired: reload the page to log in again.");
        return null;
      }
      if (!response.ok) { throw new Error("HTTP " + response.status); }
      return response.text();
    }).then(function (html) {
      if (typeof html !== "string") { return; }
      live.innerHTML = html;
      localize(live);
      failures = 0;
      refreshes += 1;
      root.setAttribute("data-refreshes", String(refreshes));
      show("");
    }).catch(function () {
      failures += 1;
      if (failures >= 2) {
        show("The dashboard does not answer; the figures below may be old. It keeps trying.");
      }
    }).then(function () { busy = false; });
  }

  window.setInterval(refresh, interval);
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) { refresh(); }
  });
})();
