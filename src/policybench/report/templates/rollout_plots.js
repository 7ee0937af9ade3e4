// A rollout page's plots, drawn from the rollout's trace embedded in the page (no server, no
// library): each action dimension against its bounds, reward and success, the model calls on a
// timeline, small state vectors; a cursor on every plot follows the video, a click seeks it.
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var WIDE = 720, NARROW = 350, H = 120, LEFT = 48, RIGHT = 22, TOP = 8, BOTTOM = 20;
  var PALETTE = ["#3b6ea8", "#e07b39", "#3a9a5b", "#9c4fb0", "#c2a02a", "#2a9fb0"];

  function inflate(entry) {
    var bytes = Uint8Array.from(atob(entry.zlib), function (c) { return c.charCodeAt(0); });
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Response(stream).arrayBuffer().then(function (buffer) {
      return typed(entry.dtype, buffer);
    });
  }

  function typed(dtype, buffer) {
    switch (dtype) {
      case "float64": return new Float64Array(buffer);
      case "float32": return new Float32Array(buffer);
      case "int32": return new Int32Array(buffer);
      case "uint8": return new Uint8Array(buffer);
      case "float16": return halves(new Uint16Array(buffer));
    }
    throw new Error("rollout trace: unknown dtype " + dtype);
  }

  function halves(bits) {  // IEEE half precision to numbers (Float16Array is not everywhere yet)
    var out = new Float32Array(bits.length);
    for (var i = 0; i < bits.length; i++) {
      var h = bits[i], sign = h & 0x8000 ? -1 : 1, exp = (h >> 10) & 31, frac = h & 1023;
      out[i] = exp === 0 ? sign * frac * Math.pow(2, -24)
        : exp === 31 ? (frac ? NaN : sign * Infinity)
        : sign * (1 + frac / 1024) * Math.pow(2, exp - 15);
    }
    return out;
  }

  function rows(array, shape) {  // a [D, T] array as D series
    if (shape.length === 1) return [array];
    var out = [];
    for (var d = 0; d < shape[0]; d++) out.push(array.subarray(d * shape[1], (d + 1) * shape[1]));
    return out;
  }

  function el(name, attrs, parent) {
    var node = document.createElementNS(NS, name);
    for (var key in attrs) node.setAttribute(key, attrs[key]);
    if (parent) parent.appendChild(node);
    return node;
  }

  function finite(values) {
    var out = [];
    for (var i = 0; i < values.length; i++) if (isFinite(values[i])) out.push(values[i]);
    return out;
  }

  // One plot: an svg with axes over [0, end] s, the y range covering `values` and `extra`.
  function Plot(container, title, series, extra, end, className, width) {
    var W = this.W = width || NARROW;
    var all = finite(extra);
    series.forEach(function (s) { all = all.concat(finite(Array.from(s))); });
    var low = all.length ? Math.min.apply(null, all) : 0, high = all.length ? Math.max.apply(null, all) : 1;
    if (high - low < 1e-9) { low -= 0.5; high += 0.5; }
    var pad = (high - low) * 0.06;
    this.low = low - pad; this.high = high + pad; this.end = end || 1;
    var figure = document.createElement("figure");
    figure.className = "plot " + className;
    var caption = document.createElement("figcaption");
    caption.textContent = title;
    figure.appendChild(caption);
    this.svg = el("svg", { viewBox: "0 0 " + W + " " + H, width: W, height: H, "class": className });
    figure.appendChild(this.svg);
    container.appendChild(figure);
    var svg = this.svg, self = this;
    el("line", { x1: LEFT, x2: LEFT, y1: TOP, y2: H - BOTTOM, "class": "axis" }, svg);
    el("line", { x1: LEFT, x2: W - RIGHT, y1: H - BOTTOM, y2: H - BOTTOM, "class": "axis" }, svg);
    [this.high - pad, this.low + pad].forEach(function (v) {
      var t = el("text", { x: LEFT - 4, y: self.y(v) + 4, "text-anchor": "end" }, svg);
      t.textContent = +v.toPrecision(3);
    });
    [0, this.end / 2, this.end].forEach(function (v) {
      var t = el("text", { x: self.x(v), y: H - 6, "text-anchor": "middle" }, svg);
      t.textContent = +v.toFixed(2) + " s";
    });
    this.cursor = el("line", { x1: LEFT, x2: LEFT, y1: TOP, y2: H - BOTTOM, "class": "cursor" }, svg);
  }
  Plot.prototype.x = function (t) { return LEFT + (t / this.end) * (this.W - LEFT - RIGHT); };
  Plot.prototype.y = function (v) {
    return TOP + (1 - (v - this.low) / (this.high - this.low)) * (H - TOP - BOTTOM);
  };
  Plot.prototype.time = function (clientX) {
    var box = this.svg.getBoundingClientRect();
    var x = (clientX - box.left) * (this.W / box.width);
    return Math.min(this.end, Math.max(0, ((x - LEFT) / (this.W - LEFT - RIGHT)) * this.end));
  };
  Plot.prototype.line = function (times, values, colour, className) {
    var points = [];
    for (var i = 0; i < values.length; i++) {
      if (isFinite(values[i])) points.push(this.x(times[i]).toFixed(1) + "," + this.y(values[i]).toFixed(1));
    }
    return el("polyline", { points: points.join(" "), stroke: colour, "class": className || "series" }, this.svg);
  };
  Plot.prototype.level = function (value, className, label) {
    if (value === null || !isFinite(value)) return;
    var y = this.y(value);
    var line = el("line", { x1: LEFT, x2: this.W - RIGHT, y1: y, y2: y, "class": className }, this.svg);
    el("title", {}, line).textContent = label + " " + value;
  };
  Plot.prototype.mark = function (t, label) {  // a violated trajectory spec's step
    var x = this.x(Math.min(t, this.end));
    var line = el("line", { x1: x, x2: x, y1: TOP, y2: H - BOTTOM, "class": "violation" }, this.svg);
    el("title", {}, line).textContent = label;
  };
  Plot.prototype.moveTo = function (t) {
    var x = this.x(Math.min(t, this.end)).toFixed(1);
    this.cursor.setAttribute("x1", x);
    this.cursor.setAttribute("x2", x);
    this.cursor.setAttribute("data-time", t.toFixed(3));
  };

  function draw(trace, a) {
    var root = document.getElementById("rollout-plots");
    var times = a.time_s, steps = trace.steps, period = trace.period_s;
    var end = steps * period, plots = [];
    var actions = rows(a.action, trace.arrays.action.shape);
    var lows = trace.action_low || [], highs = trace.action_high || [];
    var actionBox = document.getElementById("action-plots");
    actions.forEach(function (series, d) {
      var bounds = [lows[d], highs[d]].filter(function (v) { return v !== null && v !== undefined; });
      var title = "action[" + d + "]" + (bounds.length < 2 ? " (no bound recorded)" : "");
      var plot = new Plot(actionBox, title, [series], bounds, end, "action-plot");
      plot.svg.setAttribute("data-dim", d);
      plot.level(lows[d], "bound low", "action space low");
      plot.level(highs[d], "bound high", "action space high");
      plot.line(times, series, PALETTE[0]);
      plots.push(plot);
    });
    var outcomeBox = document.getElementById("outcome-plots");
    var reward = new Plot(outcomeBox, "reward (green: success)", [a.reward], [], end, "reward-plot", WIDE);
    for (var i = 0; i < steps; i++) {
      if (a.success[i]) {
        el("rect", { x: reward.x(times[i]), y: TOP, width: Math.max(1, reward.x(period) - LEFT),
                     height: H - TOP - BOTTOM, "class": "success-band" }, reward.svg);
      }
    }
    reward.line(times, a.reward, PALETTE[2]);
    plots.push(reward);
    var callBox = document.getElementById("call-plots");  // none on a loop's episode: no calls
    if (callBox) plots.push(timeline(callBox, trace, a, end));
    var stateBox = document.getElementById("state-plots");
    Object.keys(trace.arrays).filter(function (n) { return n.indexOf("state/") === 0; }).forEach(function (name) {
      var series = rows(a[name], trace.arrays[name].shape);
      var plot = new Plot(stateBox, name.slice(6) + " (" + series.length + " dims)", series, [], end, "state-plot", WIDE);
      series.forEach(function (s, d) { plot.line(times, s, PALETTE[d % PALETTE.length], "series thin"); });
      plots.push(plot);
    });
    var violations = document.getElementById("spec-violations");
    if (violations) {
      JSON.parse(violations.textContent).forEach(function (v) {
        plots.forEach(function (plot) {
          if (v.first_time_s !== null) plot.mark(v.first_time_s, v.spec + ": first violated");
          plot.mark(v.time_s, v.spec + ": margin " + v.margin);
        });
      });
    }
    root.setAttribute("data-ready", "true");
    return plots;
  }

  // The model calls: a bar per call from asked to arrived (the latency charged) on rows that
  // cycle, and below, each step coloured by the chunk whose waypoint it played (grey: the hold).
  function timeline(box, trace, a, end) {
    var plot = new Plot(box, "model calls: asked \u2192 arrived (above), waypoints played per chunk (below)",
                        [], [0, 1], end, "call-timeline", WIDE);
    plot.svg.id = "call-timeline";
    var calls = a.call_asked_s.length, lanes = 4, laneH = 10, played = {};
    for (var i = 0; i < trace.steps; i++) {
      var k = a.chunk[i];
      if (k < 0) continue;
      var p = played[k] || (played[k] = { first: i, last: i, wFirst: a.waypoint[i], wLast: a.waypoint[i] });
      p.last = i; p.wLast = a.waypoint[i];
    }
    var stepW = Math.max(1, plot.x(trace.period_s) - LEFT);
    for (var c = 0; c < calls; c++) {
      var asked = a.call_asked_s[c], arrives = asked + a.call_latency_ms[c] / 1e3, colour = PALETTE[c % PALETTE.length];
      var y = TOP + (c % lanes) * laneH, g = el("g", { "class": "call", "data-call": c }, plot.svg);
      var x0 = plot.x(asked), x1 = Math.max(plot.x(arrives), x0 + 2);
      el("rect", { x: x0, y: y, width: x1 - x0, height: laneH - 3, fill: colour, "class": "in-flight" }, g);
      var span = played[c], text = "call " + c + ": asked " + asked.toFixed(3) + " s, arrived " +
        arrives.toFixed(3) + " s, latency charged " + ((arrives - asked) * 1e3).toFixed(1) + " ms (wall " +
        a.call_wall_ms[c].toFixed(1) + " ms), " + a.call_horizon[c] + " waypoint(s); " +
        (span ? "played steps " + span.first + "\u2013" + span.last + " (waypoints " + span.wFirst + "\u2013" + span.wLast + ")"
              : "none played");
      el("title", {}, g).textContent = text;
    }
    var base = TOP + lanes * laneH + 6;
    for (var s = 0; s < trace.steps; s++) {
      var chunk = a.chunk[s], fill = chunk < 0 ? "#c8ccd2" : PALETTE[chunk % PALETTE.length];
      var r = el("rect", { x: plot.x(a.time_s[s]), y: base, width: stepW, height: H - BOTTOM - base - 2,
                           fill: fill, "class": chunk < 0 ? "held" : "played" }, plot.svg);
      el("title", {}, r).textContent = "step " + s + ": " +
        (chunk < 0 ? "held (no chunk waypoint due)" : "call " + chunk + ", waypoint " + a.waypoint[s]);
    }
    return plot;
  }

  function readout(trace, a, t) {
    var step = Math.min(trace.steps - 1, Math.max(0, Math.floor(t / trace.period_s + 1e-9)));
    var dims = trace.arrays.action.shape[0], actions = [];
    for (var d = 0; d < dims; d++) actions.push(+a.action[d * trace.steps + step].toPrecision(4));
    var states = Object.keys(trace.arrays).filter(function (n) { return n.indexOf("state/") === 0; })
      .map(function (name) {  // each small state vector's values at the step
        var values = [];
        for (var d = 0; d < trace.arrays[name].shape[0]; d++) {
          values.push(+Number(a[name][d * trace.steps + step]).toPrecision(4));
        }
        return name.slice(6) + " [" + values.join(", ") + "]";
      });
    document.getElementById("cursor-readout").textContent = "step " + step + " (" + t.toFixed(2) +
      " s): action [" + actions.join(", ") + "], reward " + (+a.reward[step].toPrecision(4)) +
      (a.success[step] ? ", success" : "") + (a.chunk[step] >= 0 ? ", call " + a.chunk[step] +
      " waypoint " + a.waypoint[step] : ", held") + (states.length ? "; " + states.join("; ") : "");
  }

  function start() {
    var source = document.getElementById("rollout-trace");
    if (!source) return;
    var trace = JSON.parse(source.textContent), names = Object.keys(trace.arrays);
    Promise.all(names.map(function (n) { return inflate(trace.arrays[n]); })).then(function (decoded) {
      var a = {};
      names.forEach(function (n, i) { a[n] = decoded[i]; });
      var plots = draw(trace, a), video = document.getElementById("rollout-video");
      function moveTo(t) {
        plots.forEach(function (p) { p.moveTo(t); });
        readout(trace, a, t);
      }
      plots.forEach(function (plot) {
        plot.svg.addEventListener("click", function (event) {
          var t = plot.time(event.clientX);
          if (video && isFinite(video.duration)) video.currentTime = Math.min(t, video.duration);
          moveTo(t);
        });
      });
      if (video) {
        var follow = function () { moveTo(video.currentTime); };
        video.addEventListener("timeupdate", follow);
        video.addEventListener("seeked", follow);
        var frame = function () { follow(); if (!video.paused) requestAnimationFrame(frame); };
        video.addEventListener("play", function () { requestAnimationFrame(frame); });
      }
      moveTo(0);
    }).catch(function (error) {
      document.getElementById("rollout-plots").textContent = "The trace could not be drawn: " + error;
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
