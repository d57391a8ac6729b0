#!/bin/bash
# The dev cluster, unchanged, on Debian 13 (trixie, Slurm 24.11) inside a container, and
# the whole integration suite run there: `make test-debian13` (docs/admin.md).
#
#   devcluster/debian13.sh [PYTEST_ARGS...]   build the image when missing, run the suite
#   devcluster/debian13.sh --build-only       build (or reuse) the image, run nothing
#   devcluster/debian13.sh --shell            the same container, an interactive shell
#
# Needs a Docker engine that answers and the local base image debian:trixie-slim
# (`devcluster/engine.sh up` provides both, with no registry). Steps:
#   1. wheels for Python 3.13 (trixie's python3) downloaded on this host into
#      /var/cache/slurm-ml/wheels-py313 (an image build here may not reach PyPI over TLS);
#   2. image slurm-ml-trixie:dev (cached: rebuilt only when its recipe or the wheel list
#      changes): the Debian packages slurm_ml/devcluster/platform.py installs, installed
#      in a `docker build --network host` (apt reaches the mirror only that way), and a
#      virtualenv /opt/venv holding slurm-ml's dependencies from the wheels;
#   3. an internal bridge network (no route off the machine; Slurm 24.11's daemons need
#      a network namespace with an address: under --network none slurmdbd fails
#      getaddrinfo) and a container with the capabilities the dev cluster needs
#      (--privileged cannot apply its capabilities under this engine);
#   4. in the container: a copy of the repository (never the host checkout: the cluster
#      writes .devcluster/ and .venv), `make cluster`, then `pytest -m integration`;
#   5. the container and the network are removed, whatever happened.
# Exit code: the suite's (pytest's), or 1 when a step before it failed. Other arguments
# go to pytest (make test-debian13 PYTEST_ARGS=...).
set -euo pipefail

IMAGE=slurm-ml-trixie:dev
BASE=debian:trixie-slim
NAME=slurm-ml-trixie-test-$$
NET=slurm-ml-trixie-net-$$
WHEELS=/var/cache/slurm-ml/wheels-py313
REPO=$(cd "$(dirname "$0")/.." && pwd)
VENV_HOST=${VENV:-$REPO/.venv}
TIMEOUT_S=7200  # the whole suite took 1,300 s here

say() { printf 'debian13: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

MODE=test
case "${1:-}" in
    --build-only) MODE=build; shift ;;
    --shell) MODE=shell; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
esac

timeout 10 docker info >/dev/null 2>&1 ||
    die "no Docker engine answers (start one: devcluster/engine.sh up)"
docker image inspect "$BASE" >/dev/null 2>&1 ||
    die "base image $BASE is missing (devcluster/engine.sh up imports it)"

# The Debian packages: the dev cluster's own list (platform.py) plus what the run needs.
PACKAGES=$(cd "$REPO" && "$VENV_HOST/bin/python" -c '
from slurm_ml.devcluster import platform as p
print(" ".join(p.DEBIAN_PACKAGES))')
EXTRA="python3 python3-venv make procps iproute2 ca-certificates"
# bookworm split slurmdbd's MySQL plugin off (OPTIONAL_PACKAGES); trixie folds it in and
# has no such package, so it is not asked for here.

wheels() {
    mkdir -p "$WHEELS"
    if [ -e "$WHEELS/.complete" ] && [ "$WHEELS/.complete" -nt "$REPO/pyproject.toml" ]; then
        say "wheels: cached in $WHEELS ($(ls "$WHEELS"/*.whl | wc -l) files)"
        return
    fi
    say "wheels: downloading slurm-ml's dependencies for Python 3.13 into $WHEELS"
    (cd "$REPO" && "$VENV_HOST/bin/pip" download -q --python-version 3.13 \
        --only-binary=:all: --platform manylinux2014_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
        -d "$WHEELS" '.[dev]') >"$WHEELS/.download.log" 2>&1 ||
        die "pip download for Python 3.13 failed (see $WHEELS/.download.log)"
    # slurm-ml itself is installed editable from the copy in the container, not from here
    rm -f "$WHEELS"/slurm_ml-*.whl
    touch "$WHEELS/.complete"
}

dockerfile() {
    cat <<EOF
FROM $BASE
RUN apt-get update -q \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \\
        $PACKAGES $EXTRA \\
 && rm -rf /var/lib/apt/lists/*
COPY *.whl /tmp/wheels/
RUN python3 -m venv /opt/venv \\
 && /opt/venv/bin/pip install -q --no-cache-dir --no-index --find-links /tmp/wheels \\
        /tmp/wheels/*.whl \\
 && rm -rf /tmp/wheels
EOF
}

image() {
    local recipe key have
    recipe=$(dockerfile)
    key=$( { echo "$recipe"; ls "$WHEELS"; } | sha256sum | cut -c1-16)
    have=$(docker image inspect -f '{{ index .Config.Labels "slurm-ml.recipe" }}' \
           "$IMAGE" 2>/dev/null || true)
    if [ "$have" = "$key" ]; then
        say "image: $IMAGE is current (recipe $key)"
        return
    fi
    say "image: building $IMAGE from $BASE (recipe $key; apt over the host network)"
    local t0=$SECONDS
    { echo "$recipe"; echo "LABEL slurm-ml.recipe=$key"; } |
        docker build -q --network host -t "$IMAGE" -f - "$WHEELS" >/dev/null ||
        die "docker build of $IMAGE failed"
    say "image: built in $((SECONDS - t0))s"
}

cleanup() {
    docker rm -f "$NAME" >/dev/null 2>&1 || true
    docker network rm "$NET" >/dev/null 2>&1 || true
}

stale() {
    # containers and networks of an earlier run that was killed before its clean-up
    local c pid
    for c in $(docker ps -aq --filter label=slurm-ml.debian13); do
        pid=$(docker inspect -f '{{ index .Config.Labels "slurm-ml.debian13" }}' "$c")
        kill -0 "$pid" 2>/dev/null && continue
        say "removing container $c and network slurm-ml-trixie-net-$pid of a killed run"
        docker rm -f "$c" >/dev/null 2>&1 || true
        docker network rm "slurm-ml-trixie-net-$pid" >/dev/null 2>&1 || true
    done
}

# What runs in the container: the repository is copied from /src (read-only) so the
# host checkout's .devcluster/ and .venv are never written; the image's venv is the
# checkout's .venv (slurm-ml added editable, no network), so `make cluster` skips `venv`.
INNER='set -euo pipefail
mkdir -p /work && cd /work
tar -C /src --exclude=./.venv --exclude=./.devcluster --exclude=./.git \
    --exclude="*/__pycache__" --exclude=./.mypy_cache --exclude=./.ruff_cache \
    --exclude=./devcluster/wheels -cf - . | tar -xf -
rm -rf .venv && ln -s /opt/venv .venv
.venv/bin/pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null
touch .venv/bin/.installed
echo "debian13: Debian $(cat /etc/debian_version), $(slurmctld -V), $(python3 -V)" >&2'

main() {
    wheels
    image
    [ "$MODE" = build ] && return 0
    stale
    trap cleanup EXIT
    trap 'exit 130' INT TERM
    say "network: $NET (internal bridge: nothing leaves this machine)"
    docker network create --internal "$NET" >/dev/null
    say "container: $NAME (caps SYS_ADMIN SYS_NICE SYS_PTRACE, seccomp unconfined)"
    # The third-party data kit beside the checkout, read in place (the tests and the dev
    # cluster look for it at ../shared/data from /work).
    local kit=()
    [ -d "$(dirname "$REPO")/shared/data" ] && kit=(-v "$(dirname "$REPO")/shared/data:/shared/data:ro")
    docker run -d --name "$NAME" --label "slurm-ml.debian13=$$" --hostname trixie \
        --network "$NET" "${kit[@]}" \
        --cap-add SYS_ADMIN --cap-add SYS_NICE --cap-add SYS_PTRACE \
        --security-opt seccomp=unconfined --tmpfs /run --tmpfs /tmp:exec \
        -v "$REPO:/src:ro" "$IMAGE" sleep infinity >/dev/null
    docker exec "$NAME" bash -c "$INNER"
    if [ "$MODE" = shell ]; then
        docker exec -it -w /work "$NAME" bash
        return 0
    fi
    local t0=$SECONDS rc=0
    say "in the container: make cluster"
    docker exec -w /work "$NAME" timeout 1800 make cluster || die "make cluster failed"
    say "cluster up after $((SECONDS - t0))s; in the container: pytest -m integration $*"
    local t1=$SECONDS
    docker exec -w /work "$NAME" timeout "$TIMEOUT_S" bash -c \
        'source .devcluster/env.sh && .venv/bin/pytest -m integration -p no:cacheprovider "$@"' \
        pytest "$@" || rc=$?
    say "suite: exit $rc, ${SECONDS}s in all ($((SECONDS - t1))s the suite) on" \
        "$(docker exec "$NAME" cat /etc/debian_version), $(docker exec "$NAME" slurmctld -V)"
    return "$rc"
}

main "$@"
