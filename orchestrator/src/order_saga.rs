//! The order saga — the one place that defines it.
//!
//! By default its steps in forward order are payment (charge / refund),
//! then inventory (deduct / restock). Each step is one [`SagaStep`] value
//! carrying its names and both its calls ([`payment::PaymentStep`],
//! [`inventory::InventoryStep`]); [`OrderParticipants::definition`] lists
//! them. A steps file ([`crate::steps_file`]) can list others: any service
//! of the generic contract ([`generic::GenericStep`]), in any order with the
//! built-in ones ([`OrderParticipants::definition_of`]).
//!
//! This is the orchestrator's gRPC client edge: requests carry the call
//! deadline and trace context ([`call`]), every participant status is
//! classified into a domain outcome here ([`classify`]), so no wire type
//! reaches the executor, and under load the forward calls of many sagas
//! share one batch RPC ([`call_batching`]).

pub mod call;
pub mod call_batching;
pub mod classify;
pub mod generic;
pub mod inventory;
pub mod payment;

use crate::step::{DefinitionError, SagaDefinition, SagaStep};
use crate::steps_file::{Builtin, StepSpec};
use service_kit::channel::GrpcChannel;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Name of the payment step.
pub const PAYMENT: &str = "payment";
/// Name of the inventory step.
pub const INVENTORY: &str = "inventory";

/// The order saga's participants, reached over gRPC.
#[derive(Clone)]
pub struct OrderParticipants {
    payment: Arc<payment::PaymentStep>,
    inventory: Arc<inventory::InventoryStep>,
    caller: call::Caller,
}

/// Why the saga a steps file lists cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum StepsError {
    /// A step's address cannot be called (TLS settings, a malformed URL).
    #[error("step {step:?}: its address {address:?} cannot be called: {source}")]
    Address {
        /// The step.
        step: String,
        /// Its configured address.
        address: String,
        #[source]
        /// Why.
        source: service_kit::tls::TlsError,
    },
    /// The steps do not make a saga.
    #[error(transparent)]
    Definition(#[from] DefinitionError),
}

impl OrderParticipants {
    /// Participants on these channels; each call's deadline is
    /// `call_timeout`; no service token is sent.
    pub fn new(payment: GrpcChannel, inventory: GrpcChannel, call_timeout: Duration) -> Self {
        Self::with_caller(payment, inventory, call::Caller::new(call_timeout))
    }

    /// Participants on these channels, called as `caller` says (deadline,
    /// service token).
    pub fn with_caller(payment: GrpcChannel, inventory: GrpcChannel, caller: call::Caller) -> Self {
        OrderParticipants {
            payment: Arc::new(payment::PaymentStep::new(payment, caller.clone())),
            inventory: Arc::new(inventory::InventoryStep::new(inventory, caller.clone())),
            caller,
        }
    }

    /// The order saga's steps in forward order.
    pub fn steps(&self) -> Vec<Arc<dyn SagaStep>> {
        vec![self.payment.clone(), self.inventory.clone()]
    }

    /// The order saga (an error only if the steps' names collided).
    pub fn definition(&self) -> Result<SagaDefinition, DefinitionError> {
        SagaDefinition::new(self.steps())
    }

    /// The saga `specs` list (a steps file), in their order: each built-in
    /// step over these participants, every other step over a lazily
    /// connecting channel to its address (TLS as `tls` says), called with
    /// the same deadline and service token.
    pub fn definition_of(
        &self,
        specs: &[StepSpec],
        tls: &service_kit::tls::TlsConfig,
    ) -> Result<SagaDefinition, StepsError> {
        let steps = specs
            .iter()
            .map(|spec| -> Result<Arc<dyn SagaStep>, StepsError> {
                Ok(match spec {
                    StepSpec::Builtin(Builtin::Payment) => self.payment.clone(),
                    StepSpec::Builtin(Builtin::Inventory) => self.inventory.clone(),
                    StepSpec::Generic(generic) => {
                        let channel = crate::participant_channel_with(&generic.address, tls)
                            .map_err(|source| StepsError::Address {
                                step: generic.name.clone(),
                                address: generic.address.clone(),
                                source,
                            })?;
                        Arc::new(generic::GenericStep::new(
                            lasting(&generic.name),
                            lasting(&generic.action),
                            lasting(&generic.compensation),
                            channel,
                            self.caller.clone(),
                        ))
                    }
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SagaDefinition::new(steps)?)
    }
}

/// A configured name, kept for the life of the process: step names are
/// `&'static str` everywhere a built-in one is, and a process reads its
/// steps file once, so each distinct name is allocated once (a test that
/// builds many definitions reuses them).
fn lasting(name: &str) -> &'static str {
    static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let Ok(mut names) = NAMES.lock() else {
        return Box::leak(name.to_owned().into_boxed_str());
    };
    let names = names.get_or_insert_with(HashSet::new);
    if let Some(known) = names.get(name) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    leaked
}
