#!/bin/sh
# Entry point of every jupyterhub-gpu image. Works as whatever uid:gid Docker gives
# the container, with or without a passwd entry for it, and never needs root.
#   - HOME: the spawner mounts the user's home and sets HOME to it. If HOME is unset,
#     "/", or not a writable directory, a private scratch home under /tmp is used
#     (work there is lost when the server stops: the warning says so).
#   - USER/LOGNAME: set from JUPYTERHUB_USER when missing (getpass, shells).
#   - No passwd entry: with libnss_wrapper in the image (APT_PACKAGES=libnss-wrapper),
#     a private copy of passwd and group (in a 0700 folder under /tmp) gives the uid the
#     user's name and $HOME, and the gid a group; LD_PRELOAD and NSS_WRAPPER_* are
#     exported, so the server and its terminals (`whoami`, the prompt) see them.
#     /etc/passwd itself stays root's and read-only. Without the library, things still
#     work and the shell prompt shows "I have no name!".
# Then runs the command (CMD: jupyterhub-singleuser plus the spawner's arguments).
set -eu

uid=$(id -u)
gid=$(id -g)
# The account name: JupyterHub's user name, reduced to a portable login name (letters,
# digits, '.', '_', '-'; not starting with '-' or '.'; at most 32 characters).
name=$(printf '%s' "${JUPYTERHUB_USER:-${NB_USER:-jovyan}}" | tr -c 'A-Za-z0-9._-' '_' | cut -c1-32)
case $name in
    ""|[-.]*) name="u$uid" ;;
esac

if [ -z "${HOME:-}" ] || [ "$HOME" = "/" ] || [ ! -d "$HOME" ] || [ ! -w "$HOME" ]; then
    echo "start-singleuser: WARNING: HOME='${HOME:-}' is not a writable directory for" \
         "uid $uid; using /tmp/home-$uid, which is lost when the server stops" >&2
    HOME="/tmp/home-$uid"
    mkdir -p "$HOME"
    chmod 0700 "$HOME"
fi
export HOME

name_account() {  # a private passwd/group naming uid:gid, used through libnss_wrapper
    lib=$1
    # a name the image already has (root, nobody) is not taken over
    if getent passwd "$name" >/dev/null 2>&1; then
        name="u$uid"
    fi
    home=$HOME
    case $home in
        *:*|*"
"*) home="/tmp/home-$uid" ;;  # never a second field or line in the passwd file
    esac
    nss=$(mktemp -d "/tmp/nss-$uid.XXXXXX")  # 0700: only this uid writes its copy
    getent passwd > "$nss/passwd" || cat /etc/passwd > "$nss/passwd"
    echo "$name:x:$uid:$gid:$name:$home:/bin/bash" >> "$nss/passwd"
    getent group > "$nss/group" || cat /etc/group > "$nss/group"
    if ! getent group "$gid" >/dev/null 2>&1; then
        group=$name
        getent group "$group" >/dev/null 2>&1 && group="g$gid"
        echo "$group:x:$gid:" >> "$nss/group"
    fi
    export LD_PRELOAD="$lib${LD_PRELOAD:+ $LD_PRELOAD}"
    export NSS_WRAPPER_PASSWD="$nss/passwd" NSS_WRAPPER_GROUP="$nss/group"
}

if ! getent passwd "$uid" >/dev/null 2>&1; then
    for lib in /usr/lib/*/libnss_wrapper.so /usr/lib/libnss_wrapper.so; do
        if [ -r "$lib" ]; then
            name_account "$lib"
            break
        fi
    done
fi

export USER="${USER:-$name}" LOGNAME="${LOGNAME:-$name}"

cd "$HOME"
exec "$@"
