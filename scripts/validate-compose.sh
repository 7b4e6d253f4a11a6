#!/usr/bin/env bash
# Validates compose.yaml with `docker-compose config -q` (no Docker engine is
# needed for that). When the `docker-compose` command is missing it installs
# Debian's `docker-compose` package with apt-get (as root, non-interactively),
# running `apt-get update` only if the install fails without it.
set -euo pipefail
cd "$(dirname "$0")/.."

compose_file=${1:-compose.yaml}

install_docker_compose() {
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "validate-compose: docker-compose is not installed and apt-get is not available;" >&2
        echo "validate-compose: install docker-compose (or the docker compose plugin) and rerun." >&2
        return 1
    fi
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            echo "validate-compose: docker-compose is not installed and installing it needs root" >&2
            echo "validate-compose: (run this script as root, or: sudo apt-get install docker-compose)." >&2
            return 1
        fi
    fi
    local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -y -q --no-install-recommends)
    echo "validate-compose: docker-compose not found; installing Debian's docker-compose package" >&2
    if "${apt[@]}" install docker-compose >&2; then
        return 0
    fi
    echo "validate-compose: install failed; running apt-get update and retrying" >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q update >&2 \
        && "${apt[@]}" install docker-compose >&2
}

if ! command -v docker-compose >/dev/null 2>&1; then
    if ! install_docker_compose || ! command -v docker-compose >/dev/null 2>&1; then
        echo "validate-compose: could not install docker-compose; $compose_file was NOT validated." >&2
        exit 1
    fi
fi

echo "validate-compose: $(docker-compose version --short 2>/dev/null || docker-compose --version)"
# An empty project directory: no .env is read from it.
project=$(mktemp -d)
trap 'rm -rf "$project"' EXIT
# Validated with tokens as ./scripts/compose-env.sh would write them (in the
# environment, so no .env file is read or written here), without and with the
# optional `tracing` profile (Jaeger, the services exporting to it)...
ADMIN_TOKEN=validate-admin SERVICE_TOKEN=validate-service \
    docker-compose --project-directory "$project" -f "$compose_file" config -q
ADMIN_TOKEN=validate-admin SERVICE_TOKEN=validate-service OTEL_EXPORTER_OTLP_ENDPOINT=http://jaeger:4317 \
    docker-compose --project-directory "$project" -f "$compose_file" --profile tracing config -q
# ...and refused without them: the stack never starts with open admin or
# saga RPCs by accident.
if env -u ADMIN_TOKEN -u SERVICE_TOKEN \
    docker-compose --project-directory "$project" -f "$compose_file" config -q 2>/dev/null; then
    echo "validate-compose: $compose_file accepts a start without ADMIN_TOKEN/SERVICE_TOKEN" >&2
    exit 1
fi
echo "validate-compose: $compose_file is valid, also with --profile tracing (and refuses to start without tokens)"
