/* Quanta live updates: one WebSocket per page to /ws/live/, no dependencies.
 *
 * A page declares what it follows with data- attributes:
 *   data-live-topic="workloads:mine workload:<id>"   topics to subscribe (any element)
 *   data-workload-id="<id>" data-updated-at="<ISO>"  an element showing one workload; inside it
 *     [data-state]               the state badge (text and class state-<lower> follow)
 *     [data-role="reason"]       the reason text
 *     [data-role="open"]         shown only while the workload can be opened;
 *       [data-role="open-link"]  its link, pointed at open_url
 *     [data-role="stop"]         shown only while the workload is active
 *     [data-role="timeline"]     a list that gets one item per state change
 *   <pre data-live-logs="<id>:<task>">                a job task's output, appended as it comes
 *   data-live-new="reload"                            a list: reload (at most every 30 s) when a
 *                                                     workload it does not show yet moves
 * Cluster inventory (topic cluster:<slug>) is handed on as a "quanta:inventory" DOM event whose
 * detail has the nodes in "items", as the nodes API lists them.
 * The connection reconnects with exponential backoff and jitter (capped at 15 s) and subscribes
 * again; each subscription's snapshot brings the page back in step after the gap.
 */
(function () {
  "use strict";

  var ACTIVE = ["Pending", "Queued", "Starting", "Running", "Stopping"];
  var MAX_LOG_CHARS = 200000;
  var MAX_DELAY_MS = 15000;
  var RELOAD_EVERY_MS = 30000;
  var CONNECT_TIMEOUT_MS = 10000;

  var topics = declaredTopics();
  if (!topics.length || !("WebSocket" in window)) {
    return;
  }
  var logs = {}; // topic -> {el, offset, attempt, placeholder}
  document.querySelectorAll("pre[data-live-logs]").forEach(function (el) {
    logs["logs:" + el.getAttribute("data-live-logs")] = { el: el, offset: null, attempt: null, placeholder: true };
  });

  var socket = null;
  var failures = 0;
  var timer = null;
  var synced = false; // false: snapshots describe the page as rendered; true: after a gap
  var leaving = false;
  var reloadTimer = null;

  function declaredTopics() {
    var seen = {};
    var list = [];
    function add(topic) {
      if (topic && !seen[topic]) {
        seen[topic] = true;
        list.push(topic);
      }
    }
    document.querySelectorAll("[data-live-topic]").forEach(function (el) {
      el.getAttribute("data-live-topic").split(/\s+/).forEach(add);
    });
    document.querySelectorAll("pre[data-live-logs]").forEach(function (el) {
      add("logs:" + el.getAttribute("data-live-logs"));
    });
    return list;
  }

  function status(value) {
    document.documentElement.setAttribute("data-live", value);
  }

  function connect() {
    timer = null;
    if (leaving) {
      return;
    }
    status("connecting");
    var scheme = location.protocol === "https:" ? "wss:" : "ws:";
    var ws = new WebSocket(scheme + "//" + location.host + "/ws/live/");
    var opened = false;
    socket = ws;
    // A handshake that neither opens nor fails (a server going down mid-way) is given up.
    var watchdog = setTimeout(function () {
      if (!opened) {
        lost(ws);
      }
    }, CONNECT_TIMEOUT_MS);
    ws.onopen = function () {
      opened = true;
      clearTimeout(watchdog);
      status("live");
      topics.forEach(function (topic) {
        var message = { action: "subscribe", topic: topic };
        var log = logs[topic];
        if (log && log.offset !== null) {
          message.offset = log.offset; // read on from where this page is
          message.attempt = log.attempt;
        }
        ws.send(JSON.stringify(message));
      });
    };
    ws.onmessage = function (event) {
      if (socket !== ws) {
        return;
      }
      var message;
      try {
        message = JSON.parse(event.data);
      } catch (e) {
        return;
      }
      receive(message);
    };
    // Browsers report a failed connection with error then close; some runtimes only with
    // error. Either one ends this connection, once.
    ws.onerror = function () {
      clearTimeout(watchdog);
      lost(ws);
    };
    ws.onclose = function () {
      clearTimeout(watchdog);
      lost(ws);
    };
  }

  function lost(ws) {
    if (socket !== ws) {
      return; // an earlier connection, already replaced
    }
    socket = null;
    synced = true; // what comes after this is a gap's resynchronisation
    status("offline");
    try {
      ws.close();
    } catch (e) {
      /* already closed */
    }
    later();
  }

  function later() {
    if (leaving || timer !== null) {
      return;
    }
    // Exponential backoff with jitter: 1 s, 2 s, 4 s … at most 15 s, each between half and all.
    var ceiling = Math.min(MAX_DELAY_MS, 1000 * Math.pow(2, failures));
    failures += 1;
    timer = setTimeout(connect, ceiling / 2 + Math.random() * (ceiling / 2));
  }

  function now() {
    // Back online or back to the tab: try at once instead of waiting out the backoff.
    if (socket === null && timer !== null) {
      clearTimeout(timer);
      connect();
    }
  }

  function receive(message) {
    switch (message.type) {
      case "snapshot":
        failures = 0;
        if (logs[message.topic]) {
          logSnapshot(logs[message.topic], message);
        }
        if (String(message.topic).indexOf("cluster:") === 0) {
          inventory({ topic: message.topic, items: message.items || [] });
        }
        (message.items || []).forEach(function (item) {
          if (item.type === "workload.state") {
            showState(item, synced ? "resync" : "snapshot");
          }
        });
        break;
      case "workload.state":
        showState(message, "event");
        break;
      case "logs":
        if (logs[message.topic]) {
          logBatch(logs[message.topic], message);
        }
        break;
      case "cluster.inventory":
        inventory(message);
        break;
      case "error":
        if (window.console) {
          console.warn("live:", message.topic || "", message.message);
        }
        break;
    }
  }

  function inventory(message) {
    // No page draws the inventory yet: an admin page listens for this event.
    document.dispatchEvent(new CustomEvent("quanta:inventory", { detail: message }));
  }

  // -- workload state ---------------------------------------------------------------------------

  function showState(item, how) {
    var selector = '[data-workload-id="' + String(item.id).replace(/["\\]/g, "") + '"]';
    var shown = document.querySelectorAll(selector);
    if (!shown.length) {
      // A workload this list does not show yet (launched elsewhere, or during a gap).
      if (how === "event" || (how === "resync" && ACTIVE.indexOf(item.state) >= 0)) {
        reloadSoon();
      }
      return;
    }
    var when = stamp(item.updated_at);
    shown.forEach(function (el) {
      var seen = stamp(el.getAttribute("data-updated-at"));
      if (when !== null && seen !== null && when < seen) {
        return; // older than what the page shows: a later event overtook it
      }
      el.setAttribute("data-updated-at", item.updated_at);
      var previous = null;
      el.querySelectorAll("[data-state]").forEach(function (badge) {
        previous = badge.getAttribute("data-state");
        badge.setAttribute("data-state", item.state);
        badge.textContent = item.state_label || item.state;
        badge.className = badge.className
          .split(/\s+/)
          .filter(function (name) {
            return name && name.indexOf("state-") !== 0;
          })
          .concat("state-" + String(item.state).toLowerCase())
          .join(" ");
      });
      el.querySelectorAll('[data-role="reason"]').forEach(function (reason) {
        reason.textContent = item.reason_text || item.reason || "";
      });
      el.querySelectorAll('[data-role="open"]').forEach(function (open) {
        setHidden(open, !item.open_url);
      });
      el.querySelectorAll('[data-role="open-link"]').forEach(function (link) {
        if (item.open_url) {
          link.setAttribute("href", item.open_url);
        }
      });
      el.querySelectorAll('[data-role="stop"]').forEach(function (stop) {
        setHidden(stop, ACTIVE.indexOf(item.state) < 0);
      });
      if (HOLDING.indexOf(item.state) < 0) {
        el.querySelectorAll('[data-role="cost"]').forEach(function (cost) {
          cost.removeAttribute("data-per-hour"); // it holds nothing any more: the count stops
        });
      }
      if (previous !== null && previous !== item.state) {
        el.querySelectorAll('[data-role="timeline"]').forEach(function (list) {
          list.appendChild(timelineEntry(item));
        });
      }
    });
  }

  // [data-role="cost"]: what the workload has cost (data-amount at data-at, seconds since
  // the epoch), counted on at data-per-hour while it holds resources.
  var HOLDING = ["Starting", "Running", "Stopping"];
  function tickCosts() {
    document.querySelectorAll('[data-role="cost"][data-per-hour]').forEach(function (cost) {
      var rate = parseFloat(cost.getAttribute("data-per-hour"));
      var amount = parseFloat(cost.getAttribute("data-amount"));
      var at = parseFloat(cost.getAttribute("data-at"));
      if (isNaN(rate) || isNaN(amount) || isNaN(at)) return;
      var hours = Math.max(0, Date.now() / 1000 - at) / 3600;
      cost.textContent = (amount + rate * hours).toFixed(2);
    });
  }
  setInterval(tickCosts, 5000);

  function setHidden(el, hidden) {
    el.hidden = hidden;
    if (hidden) {
      el.style.display = "none"; // a class may set display, which would beat [hidden]
    } else {
      el.style.removeProperty("display");
    }
  }

  // The server writes timeline times as "YYYY-MM-DD HH:MM" (local time): the same here.
  function shortTime(d) {
    function two(n) { return (n < 10 ? "0" : "") + n; }
    return d.getFullYear() + "-" + two(d.getMonth() + 1) + "-" + two(d.getDate()) + " " +
      two(d.getHours()) + ":" + two(d.getMinutes());
  }

  function timelineEntry(item) {
    var entry = document.createElement("li");
    var time = document.createElement("time");
    time.setAttribute("datetime", item.updated_at);
    var when = stamp(item.updated_at);
    time.textContent = when === null ? item.updated_at : shortTime(new Date(when / 1000));
    var state = document.createElement("strong");
    state.textContent = item.state_label || item.state;
    entry.appendChild(time);
    entry.appendChild(document.createTextNode(" "));
    entry.appendChild(state);
    entry.appendChild(document.createTextNode(" " + (item.reason_text || item.reason || "")));
    return entry;
  }

  function stamp(iso) {
    // ISO 8601 with up to microseconds, as Django and the API write it: microseconds since
    // the epoch, so that two changes in the same millisecond still order.
    var m = /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?(Z|[+-]\d\d:?\d\d)?$/.exec(iso || "");
    if (!m) {
      return null;
    }
    var ms = Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6]);
    if (m[8] && m[8] !== "Z") {
      var sign = m[8].charAt(0) === "-" ? -1 : 1;
      ms -= sign * (Number(m[8].substr(1, 2)) * 60 + Number(m[8].slice(-2))) * 60000;
    }
    return ms * 1000 + Number(((m[7] || "") + "000000").slice(0, 6));
  }

  function reloadSoon() {
    if (reloadTimer !== null || !document.querySelector('[data-live-new="reload"]')) {
      return;
    }
    var last = 0;
    try {
      last = Number(sessionStorage.getItem("quanta-live-reload") || 0);
    } catch (e) {
      last = 0;
    }
    if (Date.now() - last < RELOAD_EVERY_MS) {
      return;
    }
    reloadTimer = setTimeout(function () {
      try {
        sessionStorage.setItem("quanta-live-reload", String(Date.now()));
      } catch (e) {
        /* private mode: reload anyway */
      }
      location.reload();
    }, 1000);
  }

  // -- logs -------------------------------------------------------------------------------------

  function logSnapshot(log, message) {
    log.offset = message.offset;
    log.attempt = message.attempt;
    if (message.from === 0 || message.truncated) {
      if (message.text || message.truncated) {
        log.el.textContent = (message.truncated ? "…\n" : "") + message.text;
        log.placeholder = false;
        toBottom(log.el);
      }
      return;
    }
    appendLog(log, message.text);
  }

  function logBatch(log, message) {
    log.offset = message.offset;
    log.attempt = message.attempt;
    if (message.reset) {
      log.el.textContent = message.text; // a restarted job: a new log
      log.placeholder = false;
      return;
    }
    appendLog(log, message.text);
  }

  function appendLog(log, text) {
    if (!text) {
      return;
    }
    var el = log.el;
    var atBottom = el.scrollHeight - el.scrollTop - el.clientHeight < 8;
    if (log.placeholder) {
      el.textContent = "";
      log.placeholder = false;
    }
    el.appendChild(document.createTextNode(text));
    if (el.textContent.length > MAX_LOG_CHARS) {
      el.textContent = "…\n" + el.textContent.slice(-MAX_LOG_CHARS);
    }
    if (atBottom) {
      toBottom(el);
    }
  }

  function toBottom(el) {
    el.scrollTop = el.scrollHeight;
  }

  // -- page lifecycle -------------------------------------------------------------------------

  window.addEventListener("online", now);
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") {
      now();
    }
  });
  window.addEventListener("pagehide", function () {
    leaving = true;
    if (socket !== null) {
      socket.close(1000);
    }
  });
  window.addEventListener("pageshow", function (event) {
    if (event.persisted) {
      // Back from the browser's page cache: connect again and resynchronise.
      leaving = false;
      synced = true;
      if (socket === null) {
        clearTimeout(timer);
        connect();
      }
    }
  });

  connect();
})();
