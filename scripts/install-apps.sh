#!/usr/bin/env bash
# `make apps`: what the browser apps need beyond Python, from the registries only.
#
# * Debian packages (when root with apt-get): the desktop (TigerVNC, openbox, noVNC, xterm),
#   ripgrep for VS Code's search, bubblewrap for the workload sandbox, OpenLDAP's slapd and
#   ldap-utils for the LDAP sign-in tests (tests/tenants/directory.py starts its own slapd).
# * code-server (VS Code in the browser) from the npm registry into .apps/code-server. npm's
#   install scripts are NOT run: code-server's postinstall would run npm again, and
#   @vscode/ripgrep's downloads ripgrep from GitHub. Instead this script installs VS Code's
#   dependencies without scripts, builds the native modules with node-gyp against the
#   system's Node headers, and links Debian's /usr/bin/rg where @vscode/ripgrep expects it.
#
# * The model servers' Python (serving, docs/serving.md): a venv of its own in .apps/serving
#   with scikit-learn, joblib and numpy from PyPI, so they never move the portal's pins.
#
# Whatever cannot be installed is reported and skipped: the apps that need it are then not
# offered (the admin catalog says why). Idempotent; a stamp makes the second run instant.
set -uo pipefail
cd "$(dirname "$0")/.."

APPS_DIR="${APPS_DIR:-.apps}"
CODE_SERVER_VERSION="${CODE_SERVER_VERSION:-4.100.3}"
# One list; add packages here.
DEBIAN_PACKAGES="${DEBIAN_PACKAGES:-bubblewrap tigervnc-standalone-server tigervnc-tools novnc ripgrep xterm openbox openssh-sftp-server xauth x11-utils slapd ldap-utils}"
STAMP="$APPS_DIR/.stamp-$CODE_SERVER_VERSION"

say() { printf 'make apps: %s\n' "$*"; }

if [ -f "$STAMP" ] && [ "$STAMP" -nt "$0" ]; then
  say "already installed ($STAMP); remove it to reinstall"
  exit 0
fi
mkdir -p "$APPS_DIR"
missing=0

# -- Debian packages -----------------------------------------------------------------------
wanted=()
for package in $DEBIAN_PACKAGES; do
  [ "$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null)" = "install ok installed" ] \
    || wanted+=("$package")
done
if [ "${#wanted[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing Debian packages: ${wanted[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${wanted[@]}" \
      >/dev/null || { say "apt-get failed: ${wanted[*]} missing"; missing=1; }
  else
    say "not installed (needs root and apt-get): ${wanted[*]}"
    missing=1
  fi
fi

# -- code-server ---------------------------------------------------------------------------
install_code_server() {
  local prefix="$APPS_DIR/code-server"
  local lib="$prefix/node_modules/code-server/lib/vscode"
  local gyp
  if [ -f "$prefix/.installed-$CODE_SERVER_VERSION" ]; then
    say "code-server $CODE_SERVER_VERSION: already installed in $prefix"; return 0
  fi
  if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
    say "npm/node not found: VS Code (code-server) not installed"; return 1
  fi
  if [ "$(node -p 'process.versions.node.split(".")[0]')" != 20 ]; then
    say "code-server $CODE_SERVER_VERSION needs Node.js 20, this is $(node --version): skipped"
    return 1
  fi
  gyp="$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")/node_modules/node-gyp/bin/node-gyp.js"
  [ -f "$gyp" ] || { say "node-gyp (npm's own) not found at $gyp"; return 1; }
  say "installing code-server $CODE_SERVER_VERSION from npm into $prefix"
  npm install --prefix "$prefix" "code-server@$CODE_SERVER_VERSION" --ignore-scripts \
    --no-audit --no-fund --loglevel=error || return 1
  (cd "$lib" && npm install --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error) \
    || return 1
  (cd "$lib/extensions" && npm install --omit=dev --ignore-scripts --no-audit --no-fund \
    --loglevel=error && node ./postinstall.mjs >/dev/null) || return 1
  # The native modules VS Code's server loads (node-pty: the terminal).
  for module in node-pty @vscode/spdlog native-watchdog @vscode/deviceid; do
    if [ ! -f "$lib/node_modules/$module/build/Release/.built" ]; then
      say "building $module"
      (cd "$lib/node_modules/$module" && node "$gyp" rebuild --nodedir=/usr --loglevel=error \
        >/dev/null && touch build/Release/.built) || { say "building $module failed"; return 1; }
    fi
  done
  # code-server's own password hashing (node-pre-gyp would download it from GitHub).
  if [ ! -f "$prefix/node_modules/argon2/lib/binding/.built" ]; then
    say "building argon2"
    (cd "$prefix/node_modules/argon2" && npm_config_node_gyp="$gyp" \
      node ../@mapbox/node-pre-gyp/bin/node-pre-gyp rebuild --build-from-source --nodedir=/usr \
      --loglevel=error >/dev/null && touch lib/binding/.built) \
      || { say "building argon2 failed"; return 1; }
  fi
  # What code-server's postinstall.sh does besides running npm.
  (cd "$lib" && rm -rf node_modules.asar && ln -s node_modules node_modules.asar)
  (cd "$lib/bin/remote-cli" && ln -sf code-linux.sh code-server)
  (cd "$lib/bin/helpers" && ln -sf browser-linux.sh browser.sh)
  # @vscode/ripgrep's postinstall downloads from GitHub: Debian's ripgrep instead.
  if command -v rg >/dev/null; then
    mkdir -p "$lib/node_modules/@vscode/ripgrep/bin"
    ln -sf "$(command -v rg)" "$lib/node_modules/@vscode/ripgrep/bin/rg"
  else
    say "ripgrep (rg) not found: VS Code's search will not work"
  fi
  XDG_CONFIG_HOME="$APPS_DIR/.config" "$prefix/node_modules/.bin/code-server" --version \
    >/dev/null || return 1
  touch "$prefix/.installed-$CODE_SERVER_VERSION"
  say "code-server: $prefix/node_modules/.bin/code-server"
}
if ! install_code_server; then
  say "VS Code (code-server) is not available: it will not be offered"
  missing=1
fi

# -- the model servers' Python -------------------------------------------------------------
SERVING_PACKAGES="${SERVING_PACKAGES:-scikit-learn joblib numpy}"
install_serving() {
  local venv="$APPS_DIR/serving"
  if [ -f "$venv/.installed" ] && "$venv/bin/python" -c 'import sklearn, joblib' 2>/dev/null; then
    say "serving: already installed in $venv"; return 0
  fi
  local python
  python="$(command -v python3 || true)"
  [ -n "$python" ] || { say "python3 not found: model serving not installed"; return 1; }
  say "installing the model servers' Python ($SERVING_PACKAGES) into $venv"
  "$python" -m venv "$venv" || return 1
  # shellcheck disable=SC2086 # one word per package
  "$venv/bin/pip" install --quiet --disable-pip-version-check $SERVING_PACKAGES || return 1
  "$venv/bin/python" -c 'import sklearn, joblib' || return 1
  touch "$venv/.installed"
  say "serving: $venv/bin/python"
}
if ! install_serving; then
  say "model serving is not available: it will not be offered"
  missing=1
fi

if [ "$missing" = 0 ]; then
  touch "$STAMP"
else
  say "some apps are not installed (see above); run make apps again once fixed"
fi
exit 0
