# syntax=docker/dockerfile:1.7
#
# One image for every service: orchestrator, payment-svc, inventory-svc, the
# dev-stack tool (its `seed` loads the demo data) and the grpc-health probe all
# live in /usr/local/bin; compose.yaml's `command` picks which one a container
# runs.
#
#   docker build -t saga-orchestrator:dev .
#
# Needs BuildKit (the default builder of current Docker and of `docker compose`).
# Dependencies are cached across builds in cache mounts (cargo registry, git
# checkouts and the target directory), so a source change only recompiles the
# crates that changed. No system protoc: the protos are compiled by protox.

# Any rust image >= 1.89 (the newest rust-version among the locked crates)
# builds the workspace; 1.95 is the toolchain the test suite runs on.
ARG RUST_VERSION=1.95

# ---------------------------------------------------------------------------
FROM rust:${RUST_VERSION}-bookworm AS builder

WORKDIR /src
ENV CARGO_TERM_COLOR=never \
    CARGO_INCREMENTAL=0

COPY . .

# `-p` is needed because the workspace's default-members is only `dev-stack`.
# The binaries are copied out of the target cache mount, which is not part of
# the image layer.
RUN --mount=type=cache,id=saga-cargo-registry,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,id=saga-cargo-git,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,id=saga-target-bookworm,target=/src/target,sharing=locked \
    cargo build --release --locked \
        -p orchestrator -p payment-svc -p inventory-svc -p service-kit -p dev-stack \
        --bin orchestrator --bin payment-svc --bin inventory-svc --bin grpc-health --bin dev-stack \
 && mkdir -p /out \
 && cp target/release/orchestrator \
       target/release/payment-svc \
       target/release/inventory-svc \
       target/release/grpc-health \
       target/release/dev-stack \
       /out/

# ---------------------------------------------------------------------------
FROM debian:bookworm-slim AS runtime

RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 app \
 && useradd --system --uid 10001 --gid 10001 --home-dir /app \
        --no-create-home --shell /usr/sbin/nologin app \
 && install -d -o 10001 -g 10001 /app

COPY --from=builder /out/ /usr/local/bin/

# The working directory is writable by the service user, so an embedded
# (non-MongoDB) run can keep its ./data there too.
WORKDIR /app
USER 10001:10001

EXPOSE 50051 50052 50053 8080

# Healthchecks are set per service in compose.yaml (exec form, no shell), e.g.
#   ["CMD", "grpc-health", "127.0.0.1:50052"]
CMD ["orchestrator", "serve"]
