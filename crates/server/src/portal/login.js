// gpuhub's login page: logs in through the API (which sets the session cookie) and returns to `next`.
(function () {
  'use strict';
  const f = document.getElementById('f');
  // single sign-on keeps where the visitor was going too (the server keeps only paths of this site)
  const sso = document.getElementById('sso');
  const want = new URLSearchParams(location.search).get('next');
  if (sso && want) sso.href = '/login/oidc?next=' + encodeURIComponent(want);
  f.addEventListener('submit', async function (e) {
    e.preventDefault();
    const r = await fetch('/api/v1/login', {method: 'POST', headers: {'content-type': 'application/json'},
      // a browser session only: no API token is left behind by a browser login
      body: JSON.stringify({username: f.username.value, password: f.password.value, token: false})});
    if (!r.ok) { document.getElementById('err').textContent = (await r.json()).detail; return; }
    // return only into the hub: resolve `next` as the browser would and keep it only on this origin
    // (this also defeats `/\host`, tabs and other forms browsers read as another site)
    let next = '/';
    try {
      const u = new URL(new URLSearchParams(location.search).get('next') || '/', location.origin);
      if (u.origin === location.origin) next = u.pathname + u.search + u.hash;
    } catch (_) { /* stay with / */ }
    location.replace(next);
  });
})();
