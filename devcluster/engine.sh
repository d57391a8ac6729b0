#!/bin/bash
# A Docker engine for slurm-ml's container routes, on a machine with no image registry.
#
#   devcluster/engine.sh up [SUITE...]
#                                install docker.io and docker-compose when missing, start
#                                dockerd (vfs storage) when none answers, import the local
#                                base images debian:bookworm-slim and debian:trixie-slim
#                                (debootstrap) when they are missing; SUITEs: only
#                                those base images (default: bookworm trixie)
#   devcluster/engine.sh down    stop the dockerd this script started (and nothing else)
#   devcluster/engine.sh status  what answers, what is cached
#
# Idempotent: a second `up` changes nothing. Base root filesystems are cached as tarballs
# in /var/cache/slurm-ml/engine, never in the repository.
# The mirror is the one this machine's apt uses. Needs root (apt, dockerd, debootstrap).
# Exit codes: 0 ok; 1 a step failed (it says which); 2 bad usage.
set -euo pipefail

CACHE=/var/cache/slurm-ml/engine
RUN=/run/slurm-ml-engine
SUITES="bookworm trixie"
PIDFILE=$RUN/dockerd.pid
LOG=$RUN/dockerd.log

say() { printf 'engine: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

need_root() { [ "$(id -u)" = 0 ] || die "run as root (apt-get, dockerd and debootstrap need it)"; }

answers() { timeout 10 docker info >/dev/null 2>&1; }

mirror() {
    # the Debian mirror apt uses here (deb822 .sources first, then sources.list)
    local m
    m=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' |
        grep -v security | head -n1 || true)
    [ -n "$m" ] || m=$(grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}' |
                       grep -v security | head -n1 || true)
    echo "${m:-http://deb.debian.org/debian}"
}

install_packages() {
    local missing=()
    command -v dockerd >/dev/null || missing+=(docker.io)
    command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1 ||
        missing+=(docker-compose)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    if [ ${#missing[@]} -eq 0 ]; then
        say "packages: docker.io, compose and debootstrap present"
        return
    fi
    say "installing ${missing[*]} (apt)"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${missing[@]}" >/dev/null
}

start_dockerd() {
    if answers; then
        if [ -s "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
            say "dockerd: already running (started by this script, pid $(cat "$PIDFILE"))"
        else
            say "dockerd: already answers (not started by this script, left alone)"
        fi
        return
    fi
    mkdir -p "$RUN"
    say "dockerd: starting (vfs storage, no iptables), log $LOG"
    # setsid: the daemon outlives this script and make's shell
    setsid dockerd --storage-driver=vfs --iptables=false >"$LOG" 2>&1 < /dev/null &
    echo $! >"$PIDFILE"
    for _ in $(seq 1 60); do
        answers && { say "dockerd: answers (pid $(cat "$PIDFILE"))"; return; }
        kill -0 "$(cat "$PIDFILE")" 2>/dev/null || break
        sleep 1
    done
    tail -n 20 "$LOG" >&2 || true
    rm -f "$PIDFILE"
    die "dockerd did not answer within 60 s (log above)"
}

base_image() {
    local suite=$1 tag="debian:$1-slim" tarball="$CACHE/$1-minbase.tar"
    if docker image inspect "$tag" >/dev/null 2>&1; then
        say "image $tag: present"
        return
    fi
    mkdir -p "$CACHE"
    if [ ! -s "$tarball" ]; then
        local dir
        dir=$(mktemp -d "$CACHE/$suite.XXXXXX")
        chmod 755 "$dir"  # it becomes the image's /: mktemp's 0700 locks out every user
        say "image $tag: debootstrap --variant=minbase $suite from $(mirror) (a few minutes)"
        if ! debootstrap --variant=minbase "$suite" "$dir" "$(mirror)" >"$dir.log" 2>&1; then
            tail -n 20 "$dir.log" >&2 || true
            rm -rf "$dir"
            die "debootstrap of $suite failed (log above, $dir.log)"
        fi
        tar -C "$dir" -c . >"$tarball.part" && mv "$tarball.part" "$tarball"
        rm -rf "$dir" "$dir.log"
    fi
    say "image $tag: docker import of $tarball"
    docker import - "$tag" <"$tarball" >/dev/null
}

up() {
    need_root
    install_packages
    start_dockerd
    for suite in $SUITES; do base_image "$suite"; done
    say "ready: $(docker version --format 'engine {{.Server.Version}}' 2>/dev/null)"
}

down() {
    if [ ! -s "$PIDFILE" ]; then
        say "dockerd: not started by this script; nothing to stop"
        return
    fi
    local pid
    pid=$(cat "$PIDFILE")
    if kill -0 "$pid" 2>/dev/null; then
        say "dockerd: stopping pid $pid"
        kill "$pid"
        for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        kill -0 "$pid" 2>/dev/null && die "dockerd pid $pid did not stop within 30 s"
    fi
    rm -f "$PIDFILE"
    say "dockerd: stopped"
}

status() {
    if answers; then say "dockerd: answers"; else say "dockerd: does not answer"; fi
    [ -s "$PIDFILE" ] && say "dockerd: started by this script (pid $(cat "$PIDFILE"))"
    for suite in $SUITES; do
        if answers && docker image inspect "debian:$suite-slim" >/dev/null 2>&1; then
            say "image debian:$suite-slim: present"
        else
            say "image debian:$suite-slim: missing"
        fi
        [ -s "$CACHE/$suite-minbase.tar" ] && say "cache: $CACHE/$suite-minbase.tar"
    done
    return 0
}

case "${1:-}" in
    up) shift; [ $# -eq 0 ] || SUITES="$*"; up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
