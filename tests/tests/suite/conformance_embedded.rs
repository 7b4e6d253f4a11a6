//! The storage conformance suites on the embedded (SQLite) backend.

mod payment_store {
    saga_tests::payment_store_conformance!(saga_tests::backends::embedded_payment);
}

mod inventory_store {
    saga_tests::inventory_store_conformance!(saga_tests::backends::embedded_inventory);
}

mod saga_store {
    saga_tests::saga_store_conformance!(saga_tests::backends::embedded_sagas);
}
