// Small behaviours shared by every page, none of which a page needs in order to work:
//  - a form or submit button with data-confirm="question" asks before it is sent (Stop,
//    bulk stop); Cancel sends nothing;
//  - a checkbox with data-select-all="name" ticks or clears every checkbox of that name in
//    its form (the bulk-stop list);
//  - an open menu (<details class="nav-more">) closes on Escape or a click elsewhere.
(function () {
  "use strict";

  document.addEventListener("submit", function (event) {
    var form = event.target;
    var button = event.submitter;
    var question = (button && button.getAttribute("data-confirm")) || form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) {
      event.preventDefault();
      event.stopImmediatePropagation();
    }
  }, true);

  document.addEventListener("change", function (event) {
    var box = event.target;
    var name = box.getAttribute && box.getAttribute("data-select-all");
    if (!name || !box.form) return;
    box.form.querySelectorAll('input[type=checkbox][name="' + name + '"]').forEach(function (other) {
      if (!other.disabled) other.checked = box.checked;
    });
  });

  function closeMenus(except) {
    document.querySelectorAll("details.nav-more[open]").forEach(function (menu) {
      if (menu !== except) menu.removeAttribute("open");
    });
  }
  document.addEventListener("click", function (event) {
    closeMenus(event.target.closest && event.target.closest("details.nav-more"));
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape") closeMenus(null);
  });
})();
