//! The payment-svc binary: `participant_kit::main` over [`payment_svc::Payment`].

/// mimalloc: every gRPC call allocates many small buffers; glibc malloc
/// showed up at ~6% of CPU in profiles under load.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    participant_kit::main::<payment_svc::Payment>()
}
