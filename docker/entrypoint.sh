#!/bin/sh
# The image's entrypoint: make the node's data directories writable by the kraft user (uid
# 10001), then run the command (default `kraft server`) as that user, as official images do.
#
# Started as root (the default): each data directory that exists and is not owned by kraft
# -- a fresh bind mount is root's -- is handed to kraft (only the entries not already kraft's),
# then the command runs through setpriv as kraft:kraft with no other groups or privileges.
# Started with --user: nothing can be chown'ed; a data directory the user cannot write stops
# the container here with what to do, instead of a Permission denied from deep in the node.
#
# The data directories: /var/lib/kraft (the image's volume), KRAFT_LOG_DIRS (comma-separated)
# and KRAFT_METADATA_LOG_DIR, and /etc/kraft/certs when it is writable (compose's `certs`
# volume). Directories named only in a --config file are the user's to prepare.
set -eu

KRAFT_UID=10001
KRAFT_GID=10001

data_dirs() {
    printf '%s\n' /var/lib/kraft /etc/kraft/certs
    printf '%s\n' "${KRAFT_LOG_DIRS:-}" | tr ',' '\n'
    printf '%s\n' "${KRAFT_METADATA_LOG_DIR:-}"
}

if [ "$(id -u)" = 0 ]; then
    data_dirs | while IFS= read -r dir; do
        [ -n "$dir" ] || continue
        # the nearest existing directory: the node creates the rest as kraft
        while [ ! -d "$dir" ] && [ "$dir" != / ]; do dir=$(dirname "$dir"); done
        case $dir in /|/var|/var/lib|/etc|/etc/kraft) continue ;; esac
        [ -w "$dir" ] || continue  # a read-only mount (compose's certs for the nodes)
        find "$dir" \( ! -user "$KRAFT_UID" -o ! -group "$KRAFT_GID" \) \
            -exec chown "$KRAFT_UID:$KRAFT_GID" {} + \
            || echo "kraft: could not give $dir to uid $KRAFT_UID (the node may not write it)" >&2
    done
    exec setpriv --reuid="$KRAFT_UID" --regid="$KRAFT_GID" --clear-groups --no-new-privs -- "$@"
fi

uid=$(id -u)
data_dirs | while IFS= read -r dir; do
    [ -n "$dir" ] || continue
    while [ ! -d "$dir" ] && [ "$dir" != / ]; do dir=$(dirname "$dir"); done
    case $dir in /|/var|/var/lib|/etc|/etc/kraft) continue ;; esac
    [ "$dir" = /etc/kraft/certs ] && continue  # read by nodes, written only by `kraft certs`
    if [ ! -w "$dir" ]; then
        owner=$(stat -c %u:%g "$dir")
        cat >&2 <<EOF
kraft: the data directory $dir is owned by $owner and not writable by uid $uid (this
container runs with --user $uid). Either:
  - start the container without --user: it then makes its data directories kraft's
    (uid $KRAFT_UID) and drops to that user itself;
  - or make the host directory writable by uid $uid: sudo chown -R $uid HOST_DIR
    (HOST_DIR: the directory mounted at $dir);
  - or run as its owner: --user $owner.
EOF
        exit 1
    fi
done || exit 1
exec "$@"
