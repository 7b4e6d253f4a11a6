//! The loyalty-svc binary: `participant_kit::main` over [`loyalty_svc::Loyalty`].

/// mimalloc, as the other participants: every gRPC call allocates many
/// small buffers.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    participant_kit::main::<loyalty_svc::Loyalty>()
}
