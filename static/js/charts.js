// Draws the console's charts with the vendored Chart.js. Each <canvas data-chart="ID"> reads
// its numbers from the <script type="application/json" id="ID"> that json_script wrote:
// {label, values, labels, capacity, capacityLabel, compact}; compact (a device's sparkline on
// the hosts page) draws no legend and no time axis. No data leaves the page.
(function () {
  "use strict";
  if (typeof window.Chart === "undefined") return;
  var style = getComputedStyle(document.documentElement);
  var accent = style.getPropertyValue("--accent").trim() || "#2456d6";
  var muted = style.getPropertyValue("--muted").trim() || "#5b6676";
  var line = style.getPropertyValue("--line").trim() || "#dfe3ea";
  var still = window.matchMedia && window.matchMedia("(prefers-reduced-motion: reduce)").matches;

  document.querySelectorAll("canvas[data-chart]").forEach(function (canvas) {
    var source = document.getElementById(canvas.dataset.chart);
    if (!source) return;
    var data = JSON.parse(source.textContent);
    var compact = !!data.compact;
    var datasets = [{
      label: data.label,
      data: data.values,
      borderColor: accent,
      backgroundColor: accent + "33",
      fill: true,
      pointRadius: 0,
      borderWidth: 2,
      stepped: true
    }];
    if (data.capacity) {
      datasets.push({
        label: data.capacityLabel,
        data: data.values.map(function () { return data.capacity; }),
        borderColor: muted,
        borderDash: [6, 4],
        borderWidth: 1,
        pointRadius: 0,
        fill: false
      });
    }
    new window.Chart(canvas, {
      type: "line",
      data: { labels: data.labels, datasets: datasets },
      options: {
        maintainAspectRatio: false,
        animation: still ? false : undefined,
        interaction: { mode: "index", intersect: false },
        scales: {
          x: { display: !compact, ticks: { maxTicksLimit: 8, autoSkip: true, color: muted }, grid: { color: line } },
          y: { beginAtZero: true, max: data.capacity === 100 ? 100 : undefined, ticks: { color: muted, maxTicksLimit: compact ? 3 : undefined }, grid: { color: line } }
        },
        plugins: { legend: { display: !compact, labels: { color: muted, boxHeight: 2 } } }
      }
    });
  });
})();
