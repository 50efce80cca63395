#!/bin/sh
# Entry point of every jupyterhub-gpu image. Works as whatever uid:gid Docker gives
# the container, with or without a passwd entry for it, and never needs root.
#   - HOME: the spawner mounts the user's home and sets HOME to it. If HOME is unset,
#     "/", or not a writable directory, a private scratch home under /tmp is used
#     (work there is lost when the server stops: the warning says so).
#   - USER/LOGNAME: set from JUPYTERHUB_USER when missing (getpass, shells).
#   - No passwd entry: with libnss_wrapper in the image (APT_PACKAGES=libnss-wrapper),
#     a private passwd/group file gives the uid a name; without it, things still work
#     and the shell prompt shows "I have no name!".
# Then runs the command (CMD: jupyterhub-singleuser plus the spawner's arguments).
set -eu

uid=$(id -u)
gid=$(id -g)
name=$(printf '%s' "${NB_USER:-${JUPYTERHUB_USER:-jovyan}}" | tr -c 'A-Za-z0-9._-' '_')

if [ -z "${HOME:-}" ] || [ "$HOME" = "/" ] || [ ! -d "$HOME" ] || [ ! -w "$HOME" ]; then
    echo "start-singleuser: WARNING: HOME='${HOME:-}' is not a writable directory for" \
         "uid $uid; using /tmp/home-$uid, which is lost when the server stops" >&2
    HOME="/tmp/home-$uid"
    mkdir -p "$HOME"
    chmod 0700 "$HOME"
fi
export HOME
export USER="${USER:-$name}" LOGNAME="${LOGNAME:-$name}"

if ! getent passwd "$uid" >/dev/null 2>&1; then
    for lib in /usr/lib/*/libnss_wrapper.so /usr/lib/libnss_wrapper.so; do
        [ -r "$lib" ] || continue
        nss=$(mktemp -d "/tmp/nss-$uid.XXXXXX")
        getent passwd > "$nss/passwd" || cat /etc/passwd > "$nss/passwd"
        echo "$name:x:$uid:$gid:$name:$HOME:/bin/bash" >> "$nss/passwd"
        getent group > "$nss/group" || cat /etc/group > "$nss/group"
        getent group "$gid" >/dev/null 2>&1 || echo "$name:x:$gid:" >> "$nss/group"
        export LD_PRELOAD="$lib${LD_PRELOAD:+ $LD_PRELOAD}"
        export NSS_WRAPPER_PASSWD="$nss/passwd" NSS_WRAPPER_GROUP="$nss/group"
        break
    done
fi

cd "$HOME"
exec "$@"
