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
# The `image` profile (root Cargo.toml) is `release` without debug info and
# with symbols stripped: the image ships only what runs. The binaries are
# copied out of the target cache mount, which is not part of the image layer.
RUN --mount=type=cache,id=saga-cargo-registry,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,id=saga-cargo-git,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,id=saga-target-bookworm,target=/src/target,sharing=locked \
    cargo build --profile image --locked \
        -p orchestrator -p payment-svc -p inventory-svc -p service-kit -p dev-stack \
        --bin orchestrator --bin payment-svc --bin inventory-svc --bin grpc-health --bin dev-stack \
 && mkdir -p /out \
 && cp target/image/orchestrator \
       target/image/payment-svc \
       target/image/inventory-svc \
       target/image/grpc-health \
       target/image/dev-stack \
       /out/

# ---------------------------------------------------------------------------
# distroless/cc: glibc, libgcc and CA certificates, no shell, no package
# manager. That is all the binaries need: `ldd` lists only libc, libm and
# libgcc_s (SQLite, rustls/ring and mimalloc are linked in), and the builder's
# bookworm glibc is the one cc-debian12 ships. With no shell, healthchecks
# must be exec form (compose.yaml: ["CMD", "grpc-health", ...]).
FROM gcr.io/distroless/cc-debian12:nonroot AS runtime

COPY --from=builder /out/ /usr/local/bin/

# The image's own non-root user (nonroot, 65532; distroless has no shell to
# create another). Its home is writable by it, so an embedded (non-MongoDB)
# run can keep its ./data there.
USER 65532:65532
WORKDIR /home/nonroot

EXPOSE 50051 50052 50053 8080 9461 9462 9463

# Healthchecks are set per service in compose.yaml (exec form, no shell), e.g.
#   ["CMD", "grpc-health", "127.0.0.1:50052", ""]   (health name "": readiness)
CMD ["orchestrator", "serve"]
