/* The session viewer: draws the document embedded in the page (no request leaves an export). */
(function () {
  "use strict";
  var CFG = JSON.parse(document.getElementById("soong-config").textContent);
  var doc = JSON.parse(document.getElementById("soong-data").textContent);
  var EAGER_NODES = 2000; /* up to this many nodes every branch is drawn at once; past it, on opening */
  var FOLD_CHARS = 1200, FOLD_LINES = 24, EVENT_PAGE = 300, PATH_PAGE = 300;
  var CHAIN_HEAD = 50, CHAIN_TAIL = 300; /* past EAGER_NODES: a long chain's rows drawn at once */
  var byId, kids, agents, laneOf, activeSet, pathSet, viewLeaf = null, pairs;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function pretty(v) { return typeof v === "string" ? v : v === undefined ? "" : JSON.stringify(v, null, 2); }
  function short(id) { return id ? String(id).slice(-8) : "-"; }

  function index() {
    byId = new Map(); kids = new Map(); agents = new Map(); laneOf = new Map();
    doc.agents.forEach(function (a, i) { agents.set(a.agent_id, a); laneOf.set(a.agent_id, i % 6); });
    doc.nodes.forEach(function (n) {
      byId.set(n.id, n); kids.set(n.id, []);
      if (n.parent && kids.has(n.parent)) kids.get(n.parent).push(n);
    });
    activeSet = new Set(doc.active_path);
    if (viewLeaf === null || !byId.has(viewLeaf)) {
      var act = doc.active_path.length ? doc.active_path[doc.active_path.length - 1] : null;
      viewLeaf = act || (doc.nodes.length ? latestLeaf(doc.nodes[0]).id : null);
    }
  }
  function label(agentId) { var a = agents.get(agentId); return a ? a.label : short(agentId); }
  function latestLeaf(n) {
    for (;;) { var c = kids.get(n.id); if (!c || !c.length) return n; n = c[c.length - 1]; }
  }
  function pathTo(id) {
    var out = [], n = byId.get(id);
    while (n) { out.push(n); n = n.parent ? byId.get(n.parent) : null; }
    return out.reverse();
  }
  function descendants(n) {
    var count = 0, stack = [n];
    while (stack.length) { var c = kids.get(stack.pop().id) || []; count += c.length; stack.push.apply(stack, c); }
    return count;
  }

  function textOf(blocks) {
    var parts = [];
    (blocks || []).forEach(function (b) {
      if (b.type === "text") parts.push(b.text);
      else if (b.type === "tool_call") parts.push("\u2192 " + b.name + "(" + JSON.stringify(b.arguments) + ")");
      else if (b.type === "tool_result") parts.push((b.is_error ? "\u2717 " : "\u2190 ") + textOf(b.content));
      else if (b.type === "json") parts.push(b.summary || "json " + JSON.stringify(b.data).slice(0, 80));
      else if (b.type === "artifact_ref") parts.push("[artifact " + (b.summary || b.artifact_id) + "]");
      else parts.push("[" + b.type + "]");
    });
    return parts.join(" ");
  }

  /* -- the tree: one row per node; a branch point nests its branches; another agent opens a lane -- */
  function row(n) {
    var r = el("div", "node lane-" + laneOf.get(n.agent));
    r.dataset.nodeId = n.id;
    if (activeSet.has(n.id)) r.dataset.active = "";
    if (pathSet.has(n.id)) r.classList.add("viewed");
    if (n.type === "compaction") r.classList.add("compaction");
    if ((n.content || []).some(function (b) { return b.type === "tool_result" && b.is_error; })) r.classList.add("error");
    var link = el("a", "pick");
    link.href = "#node=" + n.id;
    link.title = "view the path through this node";
    link.appendChild(el("span", "seq", "#" + n.seq));
    link.appendChild(el("span", "who", label(n.agent) + " " + n.role + (n.type !== "message" ? " \u00b7 " + n.type : "")));
    link.appendChild(el("span", "gist", textOf(n.content).slice(0, 160)));
    r.appendChild(link);
    return r;
  }

  function chain(start, box) {
    /* One line of the tree: a chain of single children is drawn flat, and so is the viewed
       branch at a branch point (its mark says which of how many), while the other branches nest
       beside it. In a large session the middle of a long line is drawn when opened. */
    var items = [], n = start;
    for (;;) {
      items.push(function (m) { return function () { return row(m); }; }(n));
      var own = (kids.get(n.id) || []).filter(function (c) { return c.agent === n.agent; });
      if (own.length === 1) { n = own[0]; continue; }
      if (own.length === 0) break;
      var next = own.find(function (c) { return pathSet.has(c.id); });
      items.push(function (siblings, viewed) {
        return function () {
          var fork = el("div", "branches");
          siblings.forEach(function (c, k) {
            if (c === viewed) return;
            fork.appendChild(branch(c, k + 1, siblings.length));
          });
          if (viewed) fork.appendChild(el("div", "branch-mark", "\u2193 viewed branch " + (siblings.indexOf(viewed) + 1) + " of " + siblings.length + " continues below"));
          return fork;
        };
      }(own, next));
      if (!next) break;
      n = next;
    }
    var head = items.length, tail = items.length;
    if (doc.nodes.length > EAGER_NODES && items.length > CHAIN_HEAD + CHAIN_TAIL) {
      head = CHAIN_HEAD; tail = items.length - CHAIN_TAIL;
    }
    for (var i = 0; i < head; i++) box.appendChild(items[i]());
    if (head < tail) {
      var open = el("button", "open-chain", "show " + (tail - head) + " more rows of this line");
      open.addEventListener("click", function () {
        var rows = document.createDocumentFragment();
        for (var k = head; k < tail; k++) rows.appendChild(items[k]());
        box.replaceChild(rows, open);
      });
      box.appendChild(open);
    }
    for (var j = Math.max(head, tail); j < items.length; j++) box.appendChild(items[j]());
  }

  function branch(head, number, siblings) {
    var b = el("div", "branch");
    b.appendChild(el("div", "branch-mark", "\u21b3 branch " + number + " of " + siblings));
    var more = descendants(head) + 1;
    if (doc.nodes.length <= EAGER_NODES) { chain(head, b); return b; }
    b.appendChild(row(head));
    var open = el("button", "open-branch", "open branch: " + more + " nodes");
    open.addEventListener("click", function () { b.removeChild(b.lastChild); b.removeChild(b.lastChild); chain(head, b); });
    b.appendChild(open);
    return b;
  }

  function drawTree() {
    var box = document.getElementById("tree");
    box.textContent = "";
    var lanes = new Map();
    doc.agents.forEach(function (a) {
      var lane = el("section", "lane lane-" + laneOf.get(a.agent_id));
      lane.dataset.agent = a.agent_id;
      var head = el("h3", null, a.label + " \u00b7 " + a.agent_type + " \u00b7 " + a.status);
      var purpose = a.metadata && a.metadata.purpose;
      if (purpose) head.appendChild(el("span", "purpose", " " + purpose));
      if (a.fork_from_node_id && byId.has(a.fork_from_node_id)) {
        head.appendChild(el("span", "purpose", " forked from #" + byId.get(a.fork_from_node_id).seq));
      }
      lane.appendChild(head);
      lanes.set(a.agent_id, lane);
      box.appendChild(lane);
    });
    doc.nodes.forEach(function (n) {
      var parent = n.parent ? byId.get(n.parent) : null;
      if (parent && parent.agent === n.agent) return;
      var lane = lanes.get(n.agent) || box;
      var start = el("div", "lane-root");
      if (parent) start.appendChild(el("div", "branch-mark", "from " + label(parent.agent) + " #" + parent.seq));
      chain(n, start);
      lane.appendChild(start);
    });
  }

  /* -- the viewed path, node by node, tool calls with their results -- */
  function folded(text, cls) {
    var lines = text.split("\n").length;
    if (text.length <= FOLD_CHARS && lines <= FOLD_LINES) return el("pre", cls, text);
    var d = el("details", "fold " + (cls || ""));
    d.appendChild(el("summary", null, text.slice(0, 120).split("\n")[0] + " \u2026 (" + lines + " lines, " + text.length + " characters)"));
    d.addEventListener("toggle", function () {
      if (d.open && d.children.length === 1) d.appendChild(el("pre", cls, text));
    });
    return d;
  }

  function artifactLinks(id) {
    var a = doc.artifacts.find(function (x) { return x.artifact_id === id; });
    var span = el("span", "artifact");
    var name = a ? (a.filename || a.summary || short(id)) : short(id);
    span.appendChild(el("span", null, "artifact " + name + (a && a.size_bytes !== null ? " (" + a.size_bytes + " bytes)" : "") + " "));
    if (!a) return span;
    if (CFG.live) {
      var open = el("a", null, "open"); open.href = CFG.root + "a/" + encodeURIComponent(id); open.target = "_blank";
      var down = el("a", null, "download"); down.href = open.href + "?download=1";
      span.appendChild(open); span.appendChild(document.createTextNode(" \u00b7 ")); span.appendChild(down);
    } else if (a.data) {
      var mime = a.mime_type || "application/octet-stream";
      var link = el("a", null, "download"); link.href = "data:" + mime + ";base64," + a.data;
      link.download = a.filename || id;
      if (/^text\/|json/.test(mime)) {
        var show = el("button", "open-artifact", "open");
        show.addEventListener("click", function () {
          var bytes = Uint8Array.from(atob(a.data), function (c) { return c.charCodeAt(0); });
          span.appendChild(folded(new TextDecoder().decode(bytes), "artifact-text"));
          show.remove();
        });
        span.appendChild(show); span.appendChild(document.createTextNode(" \u00b7 "));
      }
      span.appendChild(link);
    } else {
      span.appendChild(el("span", "muted", "(too large to carry in the export)"));
    }
    return span;
  }

  function block(b, n) {
    if (b.type === "text") return folded(b.text, "text");
    if (b.type === "json") {
      var j = el("div", "json");
      if (b.summary) j.appendChild(el("div", "muted", b.summary));
      if (b.data !== null && b.data !== undefined) j.appendChild(folded(pretty(b.data), "code"));
      if (b.artifact_ref) j.appendChild(artifactLinks(b.artifact_ref));
      return j;
    }
    if (b.type === "artifact_ref") return artifactLinks(b.artifact_id);
    if (b.type === "tool_call") {
      var c = el("div", "call");
      c.appendChild(el("div", "call-head", "\u2192 " + b.name + "  [" + b.tool_call_id + "]"));
      c.appendChild(folded(pretty(b.arguments), "code"));
      var res = pairs.get(n.id + "/" + b.tool_call_id);
      if (res) {
        var to = el("a", "paired " + (res.block.is_error ? "bad" : "ok"), (res.block.is_error ? "\u2717 failed" : "\u2713 result") + " in #" + res.node.seq);
        to.href = "#card-" + res.node.id;
        c.appendChild(to);
      } else c.appendChild(el("span", "paired muted", "no result on this path"));
      return c;
    }
    if (b.type === "tool_result") {
      var r = el("div", "result" + (b.is_error ? " bad" : ""));
      var call = pairs.get("result/" + n.id + "/" + b.tool_call_id);
      r.appendChild(el("div", "call-head", (b.is_error ? "\u2717 error from " : "\u2190 result of ") + (call ? call.block.name + " (#" + call.node.seq + ")" : b.tool_call_id)));
      (b.content || []).forEach(function (item) { r.appendChild(block(item, n)); });
      return r;
    }
    return el("pre", "code", pretty(b));
  }

  function pairUp(path) {
    pairs = new Map();
    var open = new Map();
    path.forEach(function (n) {
      (n.content || []).forEach(function (b) {
        if (b.type === "tool_call") open.set(b.tool_call_id, { node: n, block: b });
        if (b.type === "tool_result" && open.has(b.tool_call_id)) {
          var call = open.get(b.tool_call_id);
          pairs.set(call.node.id + "/" + b.tool_call_id, { node: n, block: b });
          pairs.set("result/" + n.id + "/" + b.tool_call_id, call);
        }
      });
    });
  }

  function drawPath(path) {
    var box = document.getElementById("path");
    box.textContent = "";
    pairUp(path);
    var cut = -1;
    path.forEach(function (n, i) { if (n.type === "compaction") cut = i; });
    var leaf = path.length ? path[path.length - 1] : null;
    document.getElementById("path-title").textContent = leaf
      ? "Path to #" + leaf.seq + " (" + path.length + " nodes" + (activeSet.has(leaf.id) ? ", the active path)" : ")")
      : "No node";
    function card(n, i) {
      var frag = document.createDocumentFragment();
      if (i === cut) frag.appendChild(el("div", "cut", "\u2702 compaction: the model sees only what follows (" + (n.metadata && n.metadata.compacted_nodes ? n.metadata.compacted_nodes + " nodes summarised" : "the nodes above are summarised") + ")"));
      var c = el("article", "card lane-" + laneOf.get(n.agent) + (i < cut ? " before-cut" : "") + (n.type === "compaction" ? " compaction" : ""));
      c.id = "card-" + n.id;
      c.dataset.pathNodeId = n.id;
      var head = el("header");
      head.appendChild(el("span", "seq", "#" + n.seq));
      head.appendChild(el("span", "who", label(n.agent) + " \u00b7 " + n.role + (n.type !== "message" ? " \u00b7 " + n.type : "")));
      head.appendChild(el("span", "muted", (n.tokens !== null ? n.tokens + " tokens \u00b7 " : "") + n.at.replace("T", " ").slice(0, 19)));
      var siblings = n.parent ? (kids.get(n.parent) || []).filter(function (s) { return s.agent === n.agent; }) : [];
      if (siblings.length > 1) {
        var sw = el("span", "switch");
        siblings.forEach(function (s, k) {
          var b = el("a", s.id === n.id ? "here" : "other", "branch " + (k + 1));
          b.href = "#node=" + s.id;
          b.dataset.branchOf = n.parent;
          sw.appendChild(b);
        });
        head.appendChild(sw);
      }
      c.appendChild(head);
      (n.content || []).forEach(function (b) { c.appendChild(block(b, n)); });
      frag.appendChild(c);
      return frag;
    }
    /* the end of a long path first (what the model sees last); earlier nodes a page at a time */
    var first = Math.max(0, path.length - PATH_PAGE);
    function earlier() {
      if (first === 0) return;
      var btn = el("button", "more", "show " + Math.min(first, PATH_PAGE) + " earlier nodes (" + first + " hidden)");
      btn.addEventListener("click", function () {
        var from = Math.max(0, first - PATH_PAGE), frag = document.createDocumentFragment();
        for (var i = from; i < first; i++) frag.appendChild(card(path[i], i));
        first = from;
        box.replaceChild(frag, btn);
        var again = earlier();
        if (again) box.insertBefore(again, box.firstChild);
      });
      return btn;
    }
    var top = earlier();
    if (top) box.appendChild(top);
    for (var i = first; i < path.length; i++) box.appendChild(card(path[i], i));
  }

  /* -- timeline, runs, artifacts -- */
  function drawTimeline() {
    var box = document.getElementById("timeline");
    box.textContent = "";
    var shown = 0;
    function more() {
      var stop = Math.min(doc.events.length, shown + EVENT_PAGE);
      for (; shown < stop; shown++) {
        var e = doc.events[shown];
        var item = el("div", "event level-" + e.level);
        item.appendChild(el("span", "seq", e.seq));
        item.appendChild(el("span", "etype", e.event_type));
        item.appendChild(el("span", "muted", (e.agent_id ? label(e.agent_id) : "") + " " + e.created_at.replace("T", " ").slice(11, 19)));
        if (e.node_id && byId.has(e.node_id)) {
          var to = el("a", null, "#" + byId.get(e.node_id).seq); to.href = "#node=" + e.node_id; item.appendChild(to);
        }
        if (e.payload !== null && e.payload !== undefined) {
          var flat = JSON.stringify(e.payload);
          item.appendChild(flat.length <= 100 ? el("code", "small", flat) : folded(pretty(e.payload), "code small"));
        }
        box.appendChild(item);
      }
      if (shown < doc.events.length) {
        var btn = el("button", "more", "more events (" + (doc.events.length - shown) + ")");
        btn.addEventListener("click", function () { btn.remove(); more(); });
        box.appendChild(btn);
      }
    }
    more();
  }

  function drawRuns() {
    var body = document.getElementById("runs");
    body.textContent = "";
    doc.runs.forEach(function (r) {
      var tr = el("tr", "run status-" + r.status);
      [short(r.run_id), label(r.agent_id), r.status, r.end_reason || "-", r.turn_count === null ? "-" : r.turn_count,
       r.usage ? JSON.stringify(r.usage) : "-", r.error ? JSON.stringify(r.error) : ""].forEach(function (v) { tr.appendChild(el("td", null, v)); });
      body.appendChild(tr);
    });
    var arts = document.getElementById("artifacts");
    arts.textContent = "";
    doc.artifacts.forEach(function (a) {
      var li = el("li");
      li.appendChild(artifactLinks(a.artifact_id));
      if (a.summary) li.appendChild(el("span", "muted", " " + a.summary));
      arts.appendChild(li);
    });
  }

  function draw() {
    index();
    var path = viewLeaf ? pathTo(viewLeaf) : [];
    pathSet = new Set(path.map(function (n) { return n.id; }));
    var s = doc.session;
    document.getElementById("title").textContent = s.title;
    document.getElementById("facts").textContent = s.session_id + " \u00b7 " + s.status + " \u00b7 " + s.cwd + " \u00b7 " + doc.nodes.length + " nodes \u00b7 updated " + s.updated_at.replace("T", " ").slice(0, 19);
    drawTree(); drawPath(path); drawTimeline(); drawRuns();
    document.body.dataset.viewLeaf = viewLeaf || "";
  }

  function follow() {
    var m = /^#node=(.+)$/.exec(location.hash);
    if (!m || !byId.has(m[1])) return;
    var n = byId.get(m[1]);
    viewLeaf = pathSet.has(n.id) && viewLeaf ? viewLeaf : latestLeaf(n).id;
    draw();
    var card = document.getElementById("card-" + n.id);
    if (card) card.scrollIntoView({ block: "nearest" });
  }
  window.addEventListener("hashchange", follow);

  var started = performance.now();
  draw();
  follow();
  document.body.dataset.drawMs = String(Math.round(performance.now() - started));
  document.body.dataset.ready = "1";

  if (CFG.live) {
    var busy = false;
    setInterval(function () {
      if (busy) return;
      busy = true;
      fetch(CFG.base + "version?v=" + encodeURIComponent(doc.version))
        .then(function (r) { return r.json(); })
        .then(function (v) {
          if (!v.changed) return null;
          return fetch(CFG.base + "data").then(function (r) { return r.json(); }).then(function (fresh) {
            var wasActive = viewLeaf && activeSet.has(viewLeaf);
            doc = fresh;
            if (wasActive) viewLeaf = null; /* following the active path: follow it as it grows */
            draw();
          });
        })
        .catch(function () { /* the server stopped: keep what is shown */ })
        .then(function () { busy = false; });
    }, CFG.interval);
  }
})();
