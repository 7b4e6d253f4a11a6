//! Compiles the protos with `protox` (pure Rust), so a fresh machine needs no
//! system `protoc`. The encoded descriptor set is written to `OUT_DIR` because
//! server reflection serves it and `compile_fds` does not write one itself.

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/saga/v1/saga.proto",
        "proto/participant/v1/participant.proto",
        "proto/participant/v1/step.proto",
        "proto/payment/v1/payment.proto",
        "proto/inventory/v1/inventory.proto",
        "proto/faults/v1/faults.proto",
    ];
    let fds = protox::compile(files, ["proto"])?;
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out_dir.join("descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
