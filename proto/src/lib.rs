//! Wire types of the services, generated from `proto/`.
//!
//! Nothing in here is hand-written logic: each service converts these types
//! to its own domain types in a thin adapter, so the generated code never
//! leaks into the saga engine or the stores.
//!
//! Five packages: `saga.v1` (the orchestrator's API), `participant.v1` (what
//! both participants share), `payment.v1` and `inventory.v1` (the two
//! participants) and `faults.v1` (fault injection, served by both
//! participants).

#![warn(missing_docs)]

/// `saga.v1`: the orchestrator's public API (orders and saga inspection).
pub mod saga {
    /// Version 1.
    #[allow(missing_docs)] // generated: items carry the .proto's comments where it has them
    pub mod v1 {
        tonic::include_proto!("saga.v1");
    }
}

/// `participant.v1`: what every participant shares (the effect of a
/// compensation, one operationHistory entry, and the
/// `OperationHistoryService` that lists a request id's records), and
/// `SagaStepService`, the contract any service implements to be a saga
/// step.
pub mod participant {
    /// Version 1.
    #[allow(missing_docs)] // generated: items carry the .proto's comments where it has them
    pub mod v1 {
        tonic::include_proto!("participant.v1");
    }
}

/// `payment.v1`: the payment participant (charge, refund).
pub mod payment {
    /// Version 1.
    #[allow(missing_docs)] // generated: items carry the .proto's comments where it has them
    pub mod v1 {
        tonic::include_proto!("payment.v1");
    }
}

/// `inventory.v1`: the inventory participant (deduct, restock).
pub mod inventory {
    /// Version 1.
    #[allow(missing_docs)] // generated: items carry the .proto's comments where it has them
    pub mod v1 {
        tonic::include_proto!("inventory.v1");
    }
}

/// `faults.v1`: fault injection served by both participants (admin).
pub mod faults {
    /// Version 1.
    #[allow(missing_docs)] // generated: items carry the .proto's comments where it has them
    pub mod v1 {
        tonic::include_proto!("faults.v1");
    }
}

/// Encoded `FileDescriptorSet` of every package, served by gRPC reflection
/// so `grpcurl list/describe` works without proto files.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptor.bin"));
