/* jupyterhub-gpu-lab: the hub's notices of this server inside JupyterLab (docs/culler.md).
 *
 * A prebuilt ("federated") JupyterLab 4 extension, written by hand: the container that
 * JupyterLab loads (window._JUPYTERLAB[name] with get() and init()) and one plugin. It
 * imports nothing: it needs only the application (its commands), so no build and no
 * shared module. Every 30 s (as the hub says), and when the tab is shown again, it reads the signed-in
 * user's notices from the hub (GET <hub>/gpu/lab-notices: the hub, not this server, so
 * reading them is no activity of the server) and shows each notice of this server as a
 * JupyterLab notification (the "apputils:notify" command): the culler's warning with
 * "I'm still here", which posts to the hub's keep API with the hub's XSRF token. Text
 * only, never HTML; a time the notice names ("said", UTC) in the browser's own zone.
 */
var _JUPYTERLAB;
(function () {
  "use strict";
  var NAME = "jupyterhub-gpu-lab";
  var KEEP = "jupyterhub-gpu:keep";
  var EVERY_MS = 30000;

  function config() {
    var el = document.getElementById("jupyter-config-data");
    try { return el ? JSON.parse(el.textContent || "{}") : {}; } catch (e) { return {}; }
  }

  // The notice's words for JupyterLab (its short form, when the hub gives one: a
  // notification shows 140 characters), its UTC time in the browser's zone.
  function local(n) {
    var message = typeof n.lab_message === "string" && n.lab_message ? n.lab_message : n.message;
    if (!n.said || message.indexOf(n.said) < 0) { return message; }
    var when = new Date(n.at);
    if (isNaN(when.getTime())) { return message; }
    var opts = {hour: "2-digit", minute: "2-digit"};
    if (when.toDateString() !== new Date().toDateString()) {
      opts.weekday = "short"; opts.day = "numeric"; opts.month = "short";
    }
    return message.replace(n.said, when.toLocaleString([], opts) + " (local time)");
  }

  function activate(app) {
    var page = config();
    var hub = page.hubPrefix;
    if (!hub) { return; }  // not under JupyterHub: nothing to show
    var server = page.hubServerName || "";
    var xsrf = "";
    var shown = {};  // notice key -> {id: the notification's, text: its words}

    function notify(message, type, options) {
      return app.commands.execute("apputils:notify", {message: message, type: type,
                                                       options: options || {}});
    }

    app.commands.addCommand(KEEP, {
      label: "I'm still here",
      execute: function (args) {
        return fetch(hub + args.keep_url, {method: "POST", credentials: "same-origin",
                                           headers: {"X-XSRFToken": xsrf}})
          .then(function (r) {
            return r.json().then(function (body) { return {ok: r.ok, body: body}; },
                                 function () { return {ok: r.ok, body: null}; });
          })
          .then(function (answer) {
            var said = (answer.body && answer.body.message) ||
              "Your server could not be kept: reload the page and try again.";
            delete shown[args.key];
            return notify(said, answer.ok ? "success" : "error", {autoClose: false});
          });
      }
    });

    // One notification per notice (its kind and time): the culler says the warning again
    // each round, with the idle time grown; the notification's words follow it.
    function show(notices) {
      var now = {};
      notices.forEach(function (n) {
        if ((n.server || "") !== server || n.kind === "culled") { return; }
        var key = (n.kind || "notice") + "|" + n.at + "|" + (n.keep_url ? "keep" : "");
        var text = local(n);
        now[key] = true;
        var options = {autoClose: false, data: {source: NAME, kind: n.kind || ""}};
        if (n.keep_url) {
          options.actions = [{label: "I'm still here", commandId: KEEP,
                              args: {keep_url: n.keep_url, key: key}}];
        }
        var known = shown[key];
        if (known && known.id && known.text !== text) {
          known.text = text;
          app.commands.execute("apputils:update-notification", Object.assign(
            {id: known.id, message: text, type: "warning"}, options));
        }
        if (known) { return; }
        shown[key] = {id: null, text: text};
        notify(text, "warning", options).then(function (id) {
          if (shown[key]) { shown[key].id = id; }
        });
      });
      Object.keys(shown).forEach(function (key) {  // gone from the hub: gone from here
        if (now[key]) { return; }
        if (shown[key].id) {
          app.commands.execute("apputils:dismiss-notification", {id: shown[key].id});
        }
        delete shown[key];
      });
    }

    var every = EVERY_MS;  // the hub says how often (GPUCluster.lab_notices_interval)
    var timer = null;
    function poll() {
      window.clearTimeout(timer);
      fetch(hub + "gpu/lab-notices", {credentials: "same-origin",
                                       headers: {"Accept": "application/json"}})
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (body) {
          if (!body || !Array.isArray(body.notices)) { return; }
          xsrf = typeof body.xsrf === "string" ? body.xsrf : "";
          if (typeof body.every_s === "number" && body.every_s >= 5 && body.every_s <= 600) {
            every = body.every_s * 1000;
          }
          show(body.notices);
        }, function () {})
        .then(function () { timer = window.setTimeout(poll, every); });
    }

    app.restored.then(poll);
    document.addEventListener("visibilitychange", function () {
      if (document.visibilityState === "visible") { poll(); }
    });
  }

  var plugin = {
    id: NAME + ":notices",
    description: "The hub's notices of this server (the culler's warning, I'm still here).",
    autoStart: true,
    requires: [],
    activate: activate
  };

  var container = {
    get: function (module) {
      if (module !== "./extension" && module !== "./index") {
        return Promise.reject(new Error("Module " + module + " does not exist in container."));
      }
      return Promise.resolve(function () { return {__esModule: true, "default": plugin}; });
    },
    init: function () { return Promise.resolve(); }
  };
  (_JUPYTERLAB = typeof _JUPYTERLAB === "undefined" ? {} : _JUPYTERLAB)[NAME] = container;
})();
