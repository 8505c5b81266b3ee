// One line per policy: allocated GPU % against arrived GPU demand %, from the run's curve.
(function () {
  "use strict";
  var canvas = document.getElementById("whatif-chart");
  var source = document.getElementById("whatif-curve");
  if (!canvas || !source || typeof window.Chart === "undefined") return;
  var rows = JSON.parse(source.textContent);
  var colours = ["#2456d6", "#d6622f", "#1e7b46", "#8a3ffc", "#b42318", "#5b6676"];
  var byPolicy = {};
  rows.forEach(function (row) {
    (byPolicy[row.policy] = byPolicy[row.policy] || []).push({ x: row.arrived_pct, y: row.allocated_pct });
  });
  var datasets = Object.keys(byPolicy).map(function (policy, i) {
    return { label: policy, data: byPolicy[policy], borderColor: colours[i % colours.length],
             backgroundColor: colours[i % colours.length], pointRadius: 0, borderWidth: 2 };
  });
  new window.Chart(canvas, {
    type: "line",
    data: { datasets: datasets },
    options: {
      parsing: false, animation: false,
      scales: {
        x: { type: "linear", title: { display: true, text: canvas.dataset.xLabel } },
        y: { min: 0, max: 100, title: { display: true, text: canvas.dataset.yLabel } }
      }
    }
  });
})();
