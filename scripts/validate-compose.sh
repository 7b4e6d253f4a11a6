#!/usr/bin/env bash
# Validates compose.yaml with `docker-compose config -q` (no Docker engine is
# needed for that), or `docker compose config -q` where only the Compose
# plugin is installed. When neither is there it installs Debian's
# `docker-compose` package with apt-get (as root or with passwordless sudo,
# non-interactively), running `apt-get update` only if the install fails
# without it.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/apt-install.sh
source scripts/lib/apt-install.sh

compose_file=${1:-compose.yaml}

if command -v docker-compose >/dev/null 2>&1; then
    compose=(docker-compose)
elif docker compose version >/dev/null 2>&1; then
    compose=(docker compose)
elif apt_install validate-compose docker-compose && command -v docker-compose >/dev/null 2>&1; then
    compose=(docker-compose)
else
    echo "validate-compose: no docker-compose; $compose_file was NOT validated." >&2
    exit 1
fi

echo "validate-compose: ${compose[*]} $("${compose[@]}" version --short 2>/dev/null || "${compose[@]}" version)"
# An empty project directory: no .env is read from it.
project=$(mktemp -d)
trap 'rm -rf "$project"' EXIT
# Validated with tokens as ./scripts/compose-env.sh would write them (in the
# environment, so no .env file is read or written here), without and with the
# optional `tracing` profile (Jaeger, the services exporting to it)...
ADMIN_TOKEN=validate-admin SERVICE_TOKEN=validate-service CLIENT_TOKEN=validate-client \
    "${compose[@]}" --project-directory "$project" -f "$compose_file" config -q
ADMIN_TOKEN=validate-admin SERVICE_TOKEN=validate-service CLIENT_TOKEN=validate-client OTEL_EXPORTER_OTLP_ENDPOINT=http://jaeger:4317 \
    "${compose[@]}" --project-directory "$project" -f "$compose_file" --profile tracing config -q
# ...and refused without any one of them: the stack never starts with open
# admin, saga or client RPCs by accident.
for missing in ADMIN_TOKEN SERVICE_TOKEN CLIENT_TOKEN; do
    tokens=()
    for name in ADMIN_TOKEN SERVICE_TOKEN CLIENT_TOKEN; do
        [ "$name" = "$missing" ] || tokens+=("$name=validate")
    done
    if env -u ADMIN_TOKEN -u SERVICE_TOKEN -u CLIENT_TOKEN "${tokens[@]}" \
        "${compose[@]}" --project-directory "$project" -f "$compose_file" config -q 2>/dev/null; then
        echo "validate-compose: $compose_file accepts a start without $missing" >&2
        exit 1
    fi
done
echo "validate-compose: $compose_file is valid, also with --profile tracing (and refuses to start without tokens)"
