//! Planted defects: known bugs a test can switch on, to show that the
//! deterministic simulation (the `sim` crate) finds each one — a checker
//! that never fails proves nothing.
//!
//! Each defect sits at the one place in product code it breaks, behind
//! [`planted`]. Without the `planted-defects` cargo feature `planted` is a
//! constant `false` and nothing can switch a defect on. With it, a defect
//! is switched on for the current thread only ([`plant`]): the simulation
//! runs a whole seed on one thread, so tests running in parallel on other
//! threads never see each other's defects, and the services (which never
//! plant anything) behave exactly as without the feature.

/// A known bug that can be planted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Defect {
    /// The executor sends a compensation without first saving the saga's
    /// move to COMPENSATING (the intent of the compensation).
    SkipSaveBeforeCompensation,
    /// The participant barrier lets an action whose key is already taken
    /// apply its effect again instead of replaying the recorded outcome.
    BarrierAcceptsDuplicate,
    /// The saga store saves a version without checking that the stored
    /// version is the one the writer read.
    DropVersionCheck,
    /// The engine compensates applied steps first to last instead of last
    /// to first.
    CompensateInForwardOrder,
}

impl Defect {
    /// Every defect.
    pub const ALL: [Defect; 4] = [
        Defect::SkipSaveBeforeCompensation,
        Defect::BarrierAcceptsDuplicate,
        Defect::DropVersionCheck,
        Defect::CompensateInForwardOrder,
    ];

    /// The defect's name on the command line (`sim --defect`).
    pub fn name(self) -> &'static str {
        match self {
            Defect::SkipSaveBeforeCompensation => "skip-save-before-compensation",
            Defect::BarrierAcceptsDuplicate => "barrier-accepts-duplicate",
            Defect::DropVersionCheck => "drop-version-check",
            Defect::CompensateInForwardOrder => "compensate-in-forward-order",
        }
    }

    /// The defect named `name` ([`Defect::name`]).
    pub fn parse(name: &str) -> Option<Defect> {
        Defect::ALL.into_iter().find(|d| d.name() == name)
    }
}

#[cfg(feature = "planted-defects")]
thread_local! {
    static PLANTED: std::cell::Cell<Option<Defect>> = const { std::cell::Cell::new(None) };
}

/// Switches `defect` on for the current thread (`None`: none).
#[cfg(feature = "planted-defects")]
pub fn plant(defect: Option<Defect>) {
    PLANTED.with(|p| p.set(defect));
}

/// Whether `defect` is switched on for the current thread.
#[cfg(feature = "planted-defects")]
pub fn planted(defect: Defect) -> bool {
    PLANTED.with(|p| p.get() == Some(defect))
}

/// Whether `defect` is switched on: never, without the `planted-defects`
/// feature.
#[cfg(not(feature = "planted-defects"))]
#[inline(always)]
pub fn planted(_defect: Defect) -> bool {
    false
}
