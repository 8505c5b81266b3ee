// The endpoint page: live numbers every two seconds, and the "try it" form, which posts its
// v2 JSON through the gateway with the page's session.
(function () {
  "use strict";
  const live = document.getElementById("live");
  if (live) {
    const refresh = async () => {
      try {
        const answer = await fetch(live.dataset.statsUrl, { credentials: "same-origin" });
        if (!answer.ok) return;
        const stats = await answer.json();
        const values = {
          ...stats,
          ready: stats.replicas.ready,
          desired: stats.replicas.desired,
          gpu_utilisation: stats.replicas.gpu_utilisation,
        };
        for (const node of live.querySelectorAll("[data-stat]")) {
          const value = values[node.dataset.stat];
          node.textContent = value === null || value === undefined ? "—" : String(value);
        }
      } catch (error) {
        /* the next tick tries again */
      }
    };
    setInterval(refresh, 2000);
  }
  const form = document.getElementById("try-it");
  if (form) {
    const out = document.getElementById("try-answer");
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      out.textContent = "…";
      const answer = await fetch(form.dataset.url, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json" },
        body: form.elements.body.value,
      });
      const text = await answer.text();
      let shown = text;
      try {
        shown = JSON.stringify(JSON.parse(text), null, 1);
      } catch (error) {
        /* not JSON: shown as it came */
      }
      out.textContent = answer.status + "\n" + shown;
      out.dataset.status = String(answer.status);
    });
  }
})();
