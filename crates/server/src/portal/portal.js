// gpuhub's portal: live parts of a page (server-sent events from /events, then the page's
// `?fragment=live` swapped in) and following a workload's log. Every page works without it.
(function () {
  'use strict';
  const live = document.querySelector('[data-live]');
  if (live && window.EventSource) {
    let timer = null;
    const refresh = function () {
      const url = new URL(location.href);
      url.searchParams.set('fragment', 'live');
      fetch(url, {credentials: 'same-origin'})
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (html === null) return;
          live.innerHTML = html;
          live.dataset.refreshed = String(Number(live.dataset.refreshed || 0) + 1);
          poll();
        });
    };
    // a part that changes without events (an image's pull) says how often to ask for it again
    const poll = function () {
      const p = live.querySelector('[data-poll]');
      if (p) {
        clearTimeout(timer);
        timer = setTimeout(refresh, Number(p.dataset.poll) || 1000);
      }
    };
    poll();
    const events = new EventSource('/events');
    events.addEventListener('open', function () { document.body.dataset.live = 'connected'; });
    events.addEventListener('change', function (ev) {
      const name = live.dataset.name;
      if (name) {
        try {
          const d = JSON.parse(ev.data);
          if (d.name && d.name !== name) return;
        } catch (e) { /* refresh anyway */ }
      }
      clearTimeout(timer);
      timer = setTimeout(refresh, 150);
    });
  }
  const logs = document.getElementById('logs');
  if (logs && logs.dataset.follow && window.fetch) {
    const url = new URL(logs.dataset.follow, location.href);
    url.searchParams.set('follow', 'true');
    fetch(url, {credentials: 'same-origin'}).then(async function (r) {
      if (!r.ok) {
        logs.textContent = await r.text();
        return;
      }
      const reader = r.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        const atEnd = logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 4;
        logs.append(decoder.decode(value, {stream: true}));
        if (atEnd) logs.scrollTop = logs.scrollHeight;
      }
      logs.dataset.ended = 'true';
    });
  }
})();
// A "Copy" button beside each block meant to be copied (the ssh and VS Code lines).
(function () {
  'use strict';
  if (!navigator.clipboard) return;
  document.querySelectorAll('pre.copy').forEach(function (pre) {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'copy-button';
    b.textContent = 'Copy';
    b.addEventListener('click', function () {
      navigator.clipboard.writeText(pre.textContent).then(function () { b.textContent = 'Copied'; });
    });
    pre.after(b);
  });
})();
// Parts that fetch themselves again while what they show changes (a running workload's charts):
// `data-refresh` names the part's URL, `data-every` how often (ms); the answer replaces the part, and
// one without `data-refresh` (the workload ended) asks no more.
(function () {
  'use strict';
  if (!window.fetch) return;
  const again = function (el) {
    if (!el.dataset.refresh) return;
    setTimeout(function () {
      fetch(el.dataset.refresh, {credentials: 'same-origin'})
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (html === null) { again(el); return; }
          const t = document.createElement('template');
          t.innerHTML = html;
          const next = t.content.firstElementChild;
          if (!next) return;
          // what the reader opened stays open
          if (el.querySelector('details[open]')) {
            next.querySelectorAll('details').forEach(function (d) { d.open = true; });
          }
          next.dataset.refreshed = String(Number(el.dataset.refreshed || 0) + 1);
          el.replaceWith(next);
          again(next);
        }, function () { again(el); });
    }, Number(el.dataset.every) || 10000);
  };
  document.querySelectorAll('[data-refresh]').forEach(again);
})();
