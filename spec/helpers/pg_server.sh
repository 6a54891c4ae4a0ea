#!/usr/bin/env bash
# pg_server.sh -- a throwaway PostgreSQL for the tests (spec/helpers/pg.lua
# and spec/c/test_pg.c run it; nothing else should).
#
#   pg_server.sh start [OWNER [ADDR CIDR]]
#                               initdb into a new folder under $TMPDIR (or
#                               /tmp), start a server on 127.0.0.1 at a free
#                               port, create the database moonshard_test;
#                               with ADDR and CIDR, it listens on ADDR too
#                               and lets clients from CIDR log in (nemesis
#                               nodes in network namespaces);
#                               prints four lines: the folder, the port, the
#                               postmaster's PID, a libpq connection string.
#                               With OWNER (a PID), a guard process stops
#                               the server and removes the folder once
#                               OWNER is gone (a test that crashed or was
#                               killed leaves nothing running), and the
#                               data folder is a copy of OWNER's template,
#                               initdb'd once at its first start (see
#                               template_of)
#                               MS_PG_PORTS="P ..." in the environment:
#                               ports to try before random ones (a spec's)
#   pg_server.sh stop DIR       stop the server of DIR (pg_ctl stop -m fast,
#                               then SIGKILL to its postmaster PID if it is
#                               still alive) and remove DIR
#   pg_server.sh pause DIR      stop the server of DIR, keep the folder
#   pg_server.sh resume DIR     start it again on the same port (fails when
#                               it cannot bind each of its addresses there);
#                               prints the new postmaster PID
#
# The server listens on 127.0.0.1 only (unless ADDR is given); its unix
# socket lives in DIR. Its
# superuser `ms` logs in with a random password (scram-sha-256), so the
# tests can try a wrong one. Run as root, the server runs as the user
# `postgres` (initdb refuses root) and DIR is owned by it. Exit status 0
# or 1 with the reason on stderr; a failed start removes what it made.
set -euo pipefail

die() { echo "pg_server.sh: $*" >&2; exit 1; }

pgbin() {
    local d
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    [ -n "$d" ] && [ -x "$d/pg_ctl" ] \
        || die "no PostgreSQL server found under /usr/lib/postgresql" \
               "(install Debian's postgresql package: .ci/deps)"
    echo "$d"
}

# as_pg CMD...: runs CMD as the folder's owner (postgres when we are root)
as_pg() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

# the postmaster PID of DIR's server, empty when it has none
pm_pid() { [ -f "$1/data/postmaster.pid" ] && head -n 1 "$1/data/postmaster.pid" || true; }

# start_on DIR PORT: starts the server of DIR on PORT; 0 when it runs
start_on() {
    local dir=$1 port=$2 bin
    bin=$(pgbin)
    as_pg "$bin/pg_ctl" start -w -t 30 -D "$dir/data" -l "$dir/server.log" \
        -o "-c port=$port" >/dev/null 2>&1
}

# bound_all DIR FROM: 0 unless the server log past byte FROM says the
# postmaster could not bind one of its addresses (with ADDR it starts on
# the others: cmd_start and resume stop it). No pipe: grep -q's early exit
# would fail tail, and pipefail the caller.
bound_all() {
    ! grep -q "could not bind" \
        <(tail -c +$(($2 + 1)) "$1/server.log" 2>/dev/null)
}

# alive PID: the process exists and is no zombie
alive() {
    kill -0 "$1" 2>/dev/null || return 1
    [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]
}

# stop_guard DIR: ends DIR's guard (by its PID); pause keeps it
stop_guard() {
    local guard
    guard=$(cat "$1/guard" 2>/dev/null || true)
    [ -n "$guard" ] && kill "$guard" 2>/dev/null || true
}

stop_server() {
    local dir=$1 bin pid
    bin=$(pgbin)
    pid=$(pm_pid "$dir")
    [ -n "$pid" ] || pid=$(cat "$dir/pid" 2>/dev/null || true)
    as_pg "$bin/pg_ctl" stop -w -t 20 -m fast -D "$dir/data" >/dev/null 2>&1 \
        || true
    # pg_ctl returns when postmaster.pid is gone, a moment before the
    # postmaster exits: give it 5 s, then SIGKILL it
    [ -n "$pid" ] || return 0
    for _ in $(seq 100); do alive "$pid" || return 0; sleep 0.05; done
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 100); do alive "$pid" || return 0; sleep 0.05; done
}

# initdb_into DIR: a fresh cluster in DIR/data whose superuser `ms` has
# the password of DIR/pwfile (made here); DIR exists, owned by postgres
# when we are root. 1 with initdb's log on stderr when it fails.
initdb_into() {
    local dir=$1 bin
    bin=$(pgbin)
    od -An -N12 -tx1 /dev/urandom | tr -d ' \n' >"$dir/pwfile"
    echo >>"$dir/pwfile"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir/pwfile"
    as_pg "$bin/initdb" -D "$dir/data" -U ms --pwfile="$dir/pwfile" \
        -A scram-sha-256 -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; return 1; }
}

# template_of OWNER: prints the folder of OWNER's template (an initdb'd
# data folder and its pwfile, never started), made at OWNER's first start:
# a start copies it (about 0.5 s) instead of running initdb (about 2.5 s),
# so the servers of one test process share its random password. A guard
# removes it once OWNER is gone. Empty output when it cannot be made.
template_of() {
    local owner=$1 tpl tmp
    tpl="${TMPDIR:-/tmp}/ms-pg-template.$owner"
    if [ ! -f "$tpl/ready" ]; then
        tmp=$(mktemp -d "${TMPDIR:-/tmp}/ms-pg-tpl.XXXXXX")
        chmod 700 "$tmp"
        [ "$(id -u)" = 0 ] && chown postgres: "$tmp"
        if initdb_into "$tmp" >/dev/null 2>&1; then
            touch "$tmp/ready"
            # another start of OWNER may have made one meanwhile: keep that
            if mv -T "$tmp" "$tpl" 2>/dev/null; then
                ( while kill -0 "$owner" 2>/dev/null; do sleep 1; done
                  rm -rf "$tpl" ) </dev/null >/dev/null 2>&1 &
            else
                rm -rf "$tmp"
            fi
        else
            rm -rf "$tmp"
        fi
    fi
    [ -f "$tpl/ready" ] && echo "$tpl" || true
}

cmd_start() {
    local owner=${1:-} addr=${2:-} cidr=${3:-} bin dir pw port ok="" tpl="" i
    local listen=127.0.0.1
    case "$owner" in *[!0-9]*) die "OWNER must be a PID: $owner" ;; esac
    if [ -n "$addr" ] || [ -n "$cidr" ]; then
        [[ "$addr" =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]] \
            || die "ADDR must be an IPv4 address: $addr"
        [[ "$cidr" =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}$ ]] \
            || die "CIDR must be an IPv4 network (A.B.C.D/N): $cidr"
        listen="127.0.0.1,$addr"
    fi
    # MS_PG_PORTS (a spec's): ports to try first, before random ones
    local -a first
    read -r -a first <<<"${MS_PG_PORTS:-}"
    for port in "${first[@]}"; do
        [[ "$port" =~ ^[0-9]{1,5}$ ]] || die "MS_PG_PORTS: not a port: $port"
    done
    bin=$(pgbin)
    [ -n "$owner" ] && tpl=$(template_of "$owner")
    dir=$(mktemp -d "${TMPDIR:-/tmp}/ms-pg.XXXXXX")
    trap 'stop_server "$dir"; rm -rf "$dir"' ERR
    chmod 700 "$dir"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir"
    if [ -n "$tpl" ] && cp -a "$tpl/data" "$tpl/pwfile" "$dir/"; then
        :
    else
        rm -rf "${dir:?}/data"
        initdb_into "$dir" || { rm -rf "$dir"; die "initdb failed"; }
    fi
    pw=$(tr -d '\n' <"$dir/pwfile")
    cat >>"$dir/data/postgresql.conf" <<EOF
listen_addresses = '$listen'
unix_socket_directories = '$dir'
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 16MB
max_connections = 40
EOF
    if [ -n "$cidr" ]; then
        echo "host all all $cidr scram-sha-256" >>"$dir/data/pg_hba.conf"
    fi
    # a random port; another process may still hold it: try a few. With ADDR the
    # postmaster starts when it could bind any one of its addresses, so a
    # start that could not bind one of them (127.0.0.1 held by another
    # socket, seen once in CI: createdb then reached nothing) is stopped
    # and another port tried
    # random ones below the kernel's ephemeral range where it leaves room,
    # so that no client's connection holds the port we pick
    local lo=20000 span=40000 eph
    eph=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null \
          || true)
    if [[ "$eph" =~ ^[0-9]+$ ]] && [ "$eph" -gt $((lo + 4000)) ]; then
        span=$((eph - lo))
    fi
    for i in 0 1 2 3 4 5 6 7; do
        port=${first[$i]:-$((lo + (RANDOM * 32768 + RANDOM) % span))}
        rm -f "$dir/server.log"
        if start_on "$dir" "$port"; then
            bound_all "$dir" 0 && { ok=1; break; }
            stop_server "$dir"
            continue
        fi
        grep -q "already in use" "$dir/server.log" 2>/dev/null \
            || { cat "$dir/server.log" >&2 || true; break; }
    done
    if [ -z "$ok" ]; then
        stop_server "$dir"; rm -rf "$dir"; die "the server did not start"
    fi
    echo "$port" >"$dir/port"
    pm_pid "$dir" >"$dir/pid"
    PGPASSWORD=$pw "$bin/createdb" -h 127.0.0.1 -p "$port" -U ms \
        moonshard_test >"$dir/createdb.log" 2>&1 \
        || { cat "$dir/createdb.log" "$dir/server.log" >&2 || true
             stop_server "$dir"; rm -rf "$dir"; die "createdb failed"; }
    trap - ERR
    if [ -n "$owner" ]; then
        ( while kill -0 "$owner" 2>/dev/null && [ -d "$dir" ]; do sleep 1; done
          if [ -d "$dir" ]; then stop_server "$dir"; rm -rf "$dir"; fi
        ) </dev/null >/dev/null 2>&1 &
        echo $! >"$dir/guard"
    fi
    echo "$dir"
    echo "$port"
    cat "$dir/pid"
    echo "host=127.0.0.1 port=$port user=ms password=$pw dbname=moonshard_test connect_timeout=5"
}

check_dir() {
    [ -n "${1:-}" ] && [ -d "$1/data" ] && [ -f "$1/port" ] \
        || die "not a folder made by pg_server.sh start: ${1:-(none)}"
}

case "${1:-}" in
start) cmd_start "${2:-}" "${3:-}" "${4:-}" ;;
stop)  check_dir "${2:-}"; stop_guard "$2"; stop_server "$2"; rm -rf "$2" ;;
pause) check_dir "${2:-}"; stop_server "$2" ;;
resume)
    check_dir "${2:-}"
    # the log so far: a start with ADDR that could not bind 127.0.0.1 (the
    # port taken meanwhile) runs on ADDR alone, so it is stopped (cmd_start)
    logged=$(stat -c %s "$2/server.log" 2>/dev/null || echo 0)
    start_on "$2" "$(cat "$2/port")" || die "the server did not start again"
    if ! bound_all "$2" "$logged"; then
        stop_server "$2"
        die "the server could not bind all its addresses again (port $(cat "$2/port"))"
    fi
    pm_pid "$2" | tee "$2/pid" ;;
*) die "usage: pg_server.sh start [OWNER [ADDR CIDR]] | stop DIR | pause DIR | resume DIR" ;;
esac
