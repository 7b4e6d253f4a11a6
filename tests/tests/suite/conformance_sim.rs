//! The storage conformance suites on the deterministic simulation's
//! in-memory stores (`sim::store`): the simulation runs the product's rules
//! and engine over them, so they must keep every guarantee the embedded
//! and MongoDB backends keep.

mod payment_store {
    saga_tests::payment_store_conformance!(saga_tests::backends::simulated_payment);
}

mod inventory_store {
    saga_tests::inventory_store_conformance!(saga_tests::backends::simulated_inventory);
}

mod saga_store {
    saga_tests::saga_store_conformance!(saga_tests::backends::simulated_sagas);
}
