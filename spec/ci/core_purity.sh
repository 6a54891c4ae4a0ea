#!/bin/sh
# core_purity.sh -- the core (runtime/core/) stays free of libuv, Lua and
# libpq. Run by ctest (core-headers, core-symbols); exits non-zero and
# names the culprit when the core slips.
#
#   core_purity.sh headers CC SRCDIR [compiler flags...]
#       preprocesses every runtime/core/*.c and *.h with CC and the flags
#       (give it the include folders of libuv, LuaJIT and libpq too, so
#       that an include of theirs resolves and is seen) and fails when the
#       dependency list of one holds uv.h or uv/*, lua.h, lauxlib.h,
#       lualib.h, luajit.h, luaconf.h or libpq-fe.h, directly or through
#       another header; a file that does not preprocess fails too.
#   core_purity.sh symbols NM ARCHIVE
#       fails when the archive references (nm -u) a symbol of libuv
#       (uv_), Lua (lua_, luaL_, luaJIT_, luaopen_) or libpq (PQ, pg_),
#       or one that writes or reads the clock (write, fprintf, stderr,
#       clock_gettime, gettimeofday, time, ...).
set -u

die() {
    echo "core_purity: $*" >&2
    exit 1
}

mode=${1:-}
case "$mode" in
headers)
    [ $# -ge 3 ] || die "usage: $0 headers CC SRCDIR [flags...]"
    cc=$2
    src=$3
    shift 3
    bad=0
    n=0
    for f in "$src"/runtime/core/*.c "$src"/runtime/core/*.h; do
        [ -f "$f" ] || continue
        n=$((n + 1))
        # -M lists every header read, system ones included (-MM would not)
        deps=$("$cc" -std=c11 -D_GNU_SOURCE "$@" -x c -M "$f" 2>&1) || {
            echo "core_purity: $f does not preprocess:" >&2
            echo "$deps" >&2
            bad=1
            continue
        }
        hits=$(printf '%s\n' "$deps" | tr ' \\' '\n\n' | grep -E \
            '(^|/)(uv\.h|uv/[^/]+\.h|lua\.h|lauxlib\.h|lualib\.h|luajit\.h|luaconf\.h|libpq-fe\.h)$')
        if [ -n "$hits" ]; then
            echo "core_purity: $f pulls in:" >&2
            printf '    %s\n' $hits >&2
            bad=1
        fi
    done
    [ "$n" -gt 0 ] || die "no file under $src/runtime/core"
    [ "$bad" -eq 0 ] || exit 1
    echo "core_purity: $n core files, none pulls in libuv, Lua or libpq"
    ;;
symbols)
    [ $# -eq 3 ] || die "usage: $0 symbols NM ARCHIVE"
    [ -f "$3" ] || die "no archive $3"
    undef=$("$2" -u "$3") || die "$2 -u $3 failed"
    hits=$(printf '%s\n' "$undef" | awk 'NF >= 2 && $(NF-1) == "U" {print $NF}' |
        grep -E '^(uv_|lua_|luaL_|luaJIT_|luaopen_|PQ|pg_)' | sort -u)
    if [ -n "$hits" ]; then
        echo "core_purity: $3 references:" >&2
        printf '    %s\n' $hits >&2
        exit 1
    fi
    # nor does it read the clock or write anywhere itself: the host gives
    # the log its sink and its clock (runtime/core/log.h)
    hits=$(printf '%s\n' "$undef" | awk 'NF >= 2 && $(NF-1) == "U" {print $NF}' |
        grep -E '^(write|writev|fwrite|fputs|fputc|puts|printf|fprintf|vfprintf|dprintf|stdout|stderr|clock_gettime|gettimeofday|time)$' |
        sort -u)
    if [ -n "$hits" ]; then
        echo "core_purity: $3 does I/O or reads the clock itself:" >&2
        printf '    %s\n' $hits >&2
        exit 1
    fi
    count=$(printf '%s\n' "$undef" | grep -c ' U ')
    echo "core_purity: $3 has $count undefined references, none to" \
        "libuv, Lua or libpq"
    ;;
*)
    die "usage: $0 headers|symbols ..."
    ;;
esac
