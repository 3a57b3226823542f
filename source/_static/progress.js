/* Reading progress: which chapters this reader marked complete, kept in this browser only
 * (localStorage, so it works from file:// and from a server). The chapter list comes from
 * course-chapters.js, which the build generates from the chapter pages. Without JavaScript
 * nothing here is shown: every widget starts hidden. */
(function () {
  "use strict";
  var KEY = "jax-path-progress";
  var chapters = window.COURSE_CHAPTERS || [];

  function known(docname) {
    return chapters.some(function (c) { return c.docname === docname; });
  }
  function load() {
    try {
      var value = JSON.parse(window.localStorage.getItem(KEY) || "[]");
      return Array.isArray(value) ? value.filter(known) : [];
    } catch (error) {
      return [];
    }
  }
  function save(done) {
    try { window.localStorage.setItem(KEY, JSON.stringify(done)); } catch (error) { /* private mode */ }
  }
  function summary(done) {
    return "your progress " + done.length + "/" + chapters.length + " chapters";
  }
  function chapterOfLink(link) {
    var path;
    try { path = new URL(link.href, document.baseURI).pathname; } catch (error) { return null; }
    for (var i = 0; i < chapters.length; i++) {
      if (path === "/" + chapters[i].uri || path.slice(-(chapters[i].uri.length + 1)) === "/" + chapters[i].uri) {
        return chapters[i].docname;
      }
    }
    return null;
  }

  function render() {
    var done = load();
    var isDone = function (docname) { return done.indexOf(docname) !== -1; };

    document.querySelectorAll(".course-progress-summary").forEach(function (element) {
      element.querySelector(".course-progress-text").textContent = summary(done);
      element.hidden = false;
    });
    document.querySelectorAll(".course-chapter-card[data-chapter]").forEach(function (card) {
      card.classList.toggle("course-done", isDone(card.getAttribute("data-chapter")));
    });
    var nav = document.querySelector("nav.bd-docs-nav") || document.querySelector(".bd-sidebar-primary");
    if (nav) {
      var line = nav.querySelector(".course-progress-sidebar");
      if (!line) {
        line = document.createElement("p");
        line.className = "course-progress-sidebar";
        nav.insertBefore(line, nav.firstChild);
      }
      line.textContent = summary(done);
      nav.querySelectorAll("a.reference").forEach(function (link) {
        var docname = chapterOfLink(link);
        if (docname) { link.classList.toggle("course-done", isDone(docname)); }
      });
    }
    document.querySelectorAll(".course-progress-control[data-chapter]").forEach(function (control) {
      var docname = control.getAttribute("data-chapter");
      var button = control.querySelector("button");
      if (!button) {
        button = document.createElement("button");
        button.type = "button";
        button.className = "course-progress-toggle";
        button.addEventListener("click", function () { toggle(docname); });
        control.appendChild(button);
      }
      var complete = isDone(docname);
      button.textContent = complete ? "Chapter complete \u2713 (undo)" : "Mark this chapter complete";
      button.setAttribute("aria-pressed", complete ? "true" : "false");
      control.classList.toggle("course-done", complete);
      control.hidden = false;
    });
  }

  function toggle(docname) {
    var done = load();
    var at = done.indexOf(docname);
    if (at === -1) { done.push(docname); } else { done.splice(at, 1); }
    save(done);
    render();
  }

  function reset() {
    save([]);
    render();
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll(".course-progress-reset").forEach(function (button) {
      button.addEventListener("click", reset);
    });
    render();
  });
  window.addEventListener("storage", function (event) { if (event.key === KEY) { render(); } });
})();
