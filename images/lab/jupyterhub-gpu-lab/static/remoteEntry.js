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
 *
 * The same answer carries this server's GPU readout ("RTX 3090 · 95 % · 4.0 of 24 GiB",
 * core/gpu_readout.py): an item of JupyterLab's status bar, its tooltip the longer words.
 * The status bar's token and Lumino's Widget are taken from the share scope JupyterLab
 * gives init() (webpack's module federation: the very modules its core loaded); where
 * they are missing, the readout is left out and the notices still work.
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

  // The status bar's item: made once the hub says this server has GPUs.
  function readoutItem(statusBar) {
    var item = null;
    return function (readout) {
      if (!statusBar || !shared.Widget) { return; }
      if (!item) {
        if (!readout) { return; }
        item = new shared.Widget();
        item.id = "jupyterhub-gpu-readout";
        item.addClass("jp-StatusBar-TextItem");
        item.node.setAttribute("data-source", NAME);
        statusBar.registerStatusItem(NAME + ":gpu-readout", {
          item: item, align: "left", rank: 100, isActive: function () { return true; }
        });
      }
      item.node.textContent = readout ? String(readout.text || "") : "";
      item.node.title = readout ? String(readout.title || "") : "";
      if (readout) { item.show(); } else { item.hide(); }
    };
  }

  function activate(app, statusBar) {
    var page = config();
    var hub = page.hubPrefix;
    if (!hub) { return; }  // not under JupyterHub: nothing to show
    var server = page.hubServerName || "";
    var xsrf = "";
    var shown = {};  // notice key -> {id: the notification's, text: its words}
    var readout = readoutItem(statusBar || null);

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
          var mine = body.readout && typeof body.readout === "object" ? body.readout[server] : null;
          readout(mine && typeof mine.text === "string" ? mine : null);
        }, function () {})
        .then(function () { timer = window.setTimeout(poll, every); });
    }

    app.restored.then(poll);
    document.addEventListener("visibilitychange", function () {
      if (document.visibilityState === "visible") { poll(); }
    });
  }

  var shared = {Widget: null, IStatusBar: null};  // from JupyterLab's share scope
  var scope = null;

  // The loaded (else the newest) version of a shared module in the share scope:
  // {name: {version: {get, loaded, ...}}}; get() gives (a promise of) its factory.
  function sharedModule(name) {
    var versions = scope && scope[name];
    if (!versions) { return Promise.resolve(null); }
    var keys = Object.keys(versions).sort(function (a, b) {
      var x = a.split(".").map(Number), y = b.split(".").map(Number);
      for (var i = 0; i < 3; i++) { if ((x[i] || 0) !== (y[i] || 0)) { return (y[i] || 0) - (x[i] || 0); } }
      return 0;
    });
    var loaded = keys.filter(function (k) { return versions[k].loaded; });
    var entry = versions[(loaded.length ? loaded : keys)[0]];
    return Promise.resolve(entry.get()).then(function (factory) { return factory(); },
                                             function () { return null; });
  }

  function plugin() {
    return {
      id: NAME + ":notices",
      description: "The hub's notices of this server (the culler's warning, I'm still " +
        "here) and its GPU readout in the status bar.",
      autoStart: true,
      requires: [],
      optional: shared.IStatusBar ? [shared.IStatusBar] : [],
      activate: activate
    };
  }

  var container = {
    get: function (module) {
      if (module !== "./extension" && module !== "./index") {
        return Promise.reject(new Error("Module " + module + " does not exist in container."));
      }
      return Promise.all([sharedModule("@jupyterlab/statusbar"), sharedModule("@lumino/widgets")])
        .then(function (found) {
          shared.IStatusBar = found[0] && found[0].IStatusBar ? found[0].IStatusBar : null;
          shared.Widget = found[1] && found[1].Widget ? found[1].Widget : null;
        }, function () {})
        .then(function () {
          var made = plugin();
          return function () { return {__esModule: true, "default": made}; };
        });
    },
    init: function (shareScope) { scope = shareScope || null; return Promise.resolve(); }
  };
  (_JUPYTERLAB = typeof _JUPYTERLAB === "undefined" ? {} : _JUPYTERLAB)[NAME] = container;
})();
