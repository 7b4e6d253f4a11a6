//! The same storage conformance suites on MongoDB: a real server when
//! `MONGODB_URI` is set, else the MongoDB test server, SecantusDB (the
//! target is printed when the first test starts).

mod payment_store {
    saga_tests::payment_store_conformance!(saga_tests::backends::mongo_payment);
}

mod inventory_store {
    saga_tests::inventory_store_conformance!(saga_tests::backends::mongo_inventory);
}

mod saga_store {
    saga_tests::saga_store_conformance!(saga_tests::backends::mongo_sagas);
}
