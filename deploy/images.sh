#!/usr/bin/env bash
# Builds the fleet's images on this machine, with no image registry: the Debian base (deploy/base-image.sh, made
# when BASE_IMAGE is a localhost/ image that is missing), node-svc from dist/node-svc (tagged with its version and
# as NODE_SVC_IMAGE) and PostgreSQL 15 from Debian's package (POSTGRES_IMAGE). Unchanged layers come from podman's
# build cache, so a second run takes seconds; the superseded node-svc image is removed.
#
#   npm run build:binary && deploy/images.sh
#   env: BASE_IMAGE (default localhost/debian:bookworm-slim; debian:bookworm-slim where a registry is reachable),
#        NODE_SVC_IMAGE (default localhost/node-svc:latest), POSTGRES_IMAGE (default localhost/node-svc-postgres:15)
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=${BASE_IMAGE:-localhost/debian:bookworm-slim}
NODE_SVC_IMAGE=${NODE_SVC_IMAGE:-localhost/node-svc:latest}
POSTGRES_IMAGE=${POSTGRES_IMAGE:-localhost/node-svc-postgres:15}

if [ ! -x dist/node-svc ]; then
  echo "images.sh: dist/node-svc is missing: run \`npm run build:binary\` first" >&2
  exit 1
fi
case "$BASE" in
  localhost/*) BASE_IMAGE=$BASE deploy/base-image.sh ;;
esac

# The binary answers for its own version (it runs here: it was built here, for this glibc).
VERSION=$(NODE_OPTIONS= dist/node-svc --version)
TAGS=(-t "$NODE_SVC_IMAGE")
last=${NODE_SVC_IMAGE##*/}
if [[ "$last" == *:* ]]; then TAGS+=(-t "${NODE_SVC_IMAGE%:*}:$VERSION"); fi

echo "images: $NODE_SVC_IMAGE (node-svc $VERSION) on $BASE"
# --format docker: the OCI format drops HEALTHCHECK.
podman build --format docker --build-arg BASE="$BASE" --build-arg VERSION="$VERSION" "${TAGS[@]}" -f Containerfile .
echo "images: $POSTGRES_IMAGE on $BASE"
if ! podman build --format docker --build-arg BASE="$BASE" -t "$POSTGRES_IMAGE" -f deploy/postgres/Containerfile deploy/postgres; then
  echo "images.sh: the PostgreSQL image installs Debian's postgresql-15 with apt inside the build: the build's" \
    "container must reach the Debian mirror in the base image's /etc/apt/sources.list" >&2
  exit 1
fi
# Earlier builds of node-svc, now untagged: 100 MB each.
podman image prune -f --filter label=org.opencontainers.image.title=node-svc >/dev/null
podman image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E "^(${NODE_SVC_IMAGE%:*}|${POSTGRES_IMAGE%:*}|${BASE%:*}):" || true
