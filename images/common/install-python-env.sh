#!/bin/sh
# Installs, inside `docker build`, everything a jupyterhub-gpu image needs:
#   1. python3 with venv, from the distribution, only when the base lacks it (the
#      nvidia/cuda images have no Python; the CI base, Debian + python3-venv, has it),
#      plus APT_PACKAGES (e.g. libnss-wrapper) when set;
#   2. a virtual environment at $VENV (default /opt/venv), readable by every uid, in
#      which `pip install --user` works (users' packages go to ~/.local);
#   3. jupyterhub==$JUPYTERHUB_VERSION and $JUPYTER_PIP (JupyterLab);
#   4. $FRAMEWORK_PIP (may be empty: a fast, framework-less test image), with
#      $FRAMEWORK_INDEX_URL as an extra index and $FRAMEWORK_PIP_FLAGS, after
#      $FRAMEWORK_PIP_PRE; then `python -c "$FRAMEWORK_CHECK"`;
#   5. /etc/profile.d/jupyterhub-gpu-path.sh: login shells (JupyterLab's terminal) get
#      the image's PATH back, $VENV/bin first; jupyterhub-gpu-name.sh: a login shell the
#      server did not start (SSH's docker exec) gets the user's name (libnss_wrapper);
#   6. JupyterLab's site settings ($VENV/share/jupyter/lab/settings/overrides.json): no
#      "Would you like to receive official Jupyter news?" prompt and no update check
#      (a server here reaches no news feed, and the corner is where the hub's warnings
#      show: docs/culler.md); a user may still turn them on in her own settings.
# pip trusts $PIP_CA_BUNDLE when set (a CA bundle copied into the build context).
set -eu
set -f  # no globbing: requirement specs like 'pkg[extra]>=1' stay literal

VENV=${VENV:-/opt/venv}
here=$(dirname "$0")

has_python() {
    command -v python3 >/dev/null 2>&1 && python3 -c 'import venv, ensurepip' >/dev/null 2>&1
}

apt_packages=${APT_PACKAGES:-}
if ! has_python; then
    apt_packages="python3 python3-venv ca-certificates $apt_packages"
fi
if [ -n "$(echo "$apt_packages" | tr -d ' ')" ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "install-python-env: need apt-get to install: $apt_packages" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    # shellcheck disable=SC2086  # word splitting intended
    apt-get install -y --no-install-recommends $apt_packages
    rm -rf /var/lib/apt/lists/*
fi

if [ -n "${PIP_CA_BUNDLE:-}" ]; then
    if [ ! -s "$PIP_CA_BUNDLE" ]; then
        echo "install-python-env: PIP_CA_BUNDLE=$PIP_CA_BUNDLE is missing or empty" >&2
        exit 1
    fi
    export PIP_CERT="$PIP_CA_BUNDLE"
fi
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off

# --system-site-packages: what makes `pip install --user` work for users (pip refuses it
# in a venv that hides the system's site-packages, and Python then skips ~/.local): their
# additions land in their home, where "save my environment" reads them (docs/my-images.md)
python3 -m venv --system-site-packages "$VENV"
pip="$VENV/bin/python -m pip"
# shellcheck disable=SC2086
$pip install "jupyterhub==${JUPYTERHUB_VERSION:?JUPYTERHUB_VERSION is required}" ${JUPYTER_PIP:-}

if [ -n "$(echo "${FRAMEWORK_PIP:-}" | tr -d ' ')" ]; then
    if [ -n "${FRAMEWORK_PIP_PRE:-}" ]; then
        # shellcheck disable=SC2086  # e.g. an old setuptools for a legacy sdist
        $pip install $FRAMEWORK_PIP_PRE
    fi
    index=""
    if [ -n "${FRAMEWORK_INDEX_URL:-}" ]; then
        index="--extra-index-url $FRAMEWORK_INDEX_URL"
    fi
    # shellcheck disable=SC2086
    $pip install $index ${FRAMEWORK_PIP_FLAGS:-} $FRAMEWORK_PIP
    if [ -n "${FRAMEWORK_CHECK:-}" ]; then
        "$VENV/bin/python" -c "$FRAMEWORK_CHECK"
    fi
fi

"$VENV/bin/jupyterhub-singleuser" --version

# Login shells: JupyterLab's terminal runs `bash -l`, and /etc/profile (Debian, Ubuntu)
# sets PATH anew, which drops $VENV/bin and the base's own entries (CUDA's). This file,
# read by /etc/profile after that, puts back the image's PATH as it is here (the ENV PATH
# of the Dockerfile, $VENV/bin first), then what the shell had, without duplicates.
image_path="$VENV/bin:$PATH"
case $image_path in
    *"'"*|*'\'*) echo "install-python-env: PATH has a quote or backslash: $image_path" >&2; exit 1 ;;
esac
mkdir -p /etc/profile.d
cat > /etc/profile.d/jupyterhub-gpu-path.sh <<PROFILE
# Written by jupyterhub-gpu's install-python-env.sh (images/common): the image's PATH,
# $VENV/bin first, for login shells (/etc/profile resets PATH): docs/troubleshooting.md.
jhgpu_rest='$image_path':\$PATH:
jhgpu_path=
while [ -n "\$jhgpu_rest" ]; do
    jhgpu_dir=\${jhgpu_rest%%:*}
    jhgpu_rest=\${jhgpu_rest#*:}
    case ":\$jhgpu_path:" in
        *":\$jhgpu_dir:"*) ;;
        *) [ -z "\$jhgpu_dir" ] || jhgpu_path=\${jhgpu_path:+\$jhgpu_path:}\$jhgpu_dir ;;
    esac
done
PATH=\$jhgpu_path
export PATH
unset jhgpu_rest jhgpu_path jhgpu_dir
PROFILE
chmod 0644 /etc/profile.d/jupyterhub-gpu-path.sh
# A shell the server did not start (an SSH session is a `docker exec` in the running
# container) names the user as the server's start did: it takes libnss_wrapper's
# variables from the server's process 1 (readable by the same uid only), safe paths only.
cat > /etc/profile.d/jupyterhub-gpu-name.sh <<'PROFILE'
# Written by jupyterhub-gpu's install-python-env.sh (images/common): docs/ssh.md.
if [ -z "${NSS_WRAPPER_PASSWD:-}" ] && [ -r /proc/1/environ ]; then
    for jhgpu_kv in $(tr '\0' '\n' < /proc/1/environ \
        | grep -E '^(LD_PRELOAD|NSS_WRAPPER_PASSWD|NSS_WRAPPER_GROUP)=/[A-Za-z0-9._/-]+$'); do
        export "${jhgpu_kv?}"
    done
    unset jhgpu_kv
fi
PROFILE
chmod 0644 /etc/profile.d/jupyterhub-gpu-name.sh

mkdir -p "$VENV/share/jupyter/lab/settings"
cat > "$VENV/share/jupyter/lab/settings/overrides.json" <<'SETTINGS'
{
  "@jupyterlab/apputils-extension:notification": {
    "checkForUpdates": false,
    "fetchNews": "false"
  }
}
SETTINGS
chmod 0755 "$here/start-singleuser.sh"
chmod 1777 /tmp  # a docker-imported rootfs may lack the sticky, world-writable /tmp
chmod -R a+rX "$VENV"
rm -f "$here/pip-ca.crt"
