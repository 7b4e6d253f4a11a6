//! The NestJS shipping example (`examples/nestjs-shipping`, built on
//! `@saga/participant` and its Nest module) passes every rule of the kit,
//! batches included, with a service token: the built app run as in
//! production (`node dist/src/main.js`, configured by its environment,
//! ready when it prints `READY <port>`; `saga_tests::shipping`) on a fresh
//! database of the MongoDB test target, refusing the product of the kit's
//! refused order.
//!
//! The app must be built first (the test command's examples build stage,
//! `scripts/test-examples.sh --build-only`, does it); without it the test
//! skips with a printed reason, or fails under `CI=true` or
//! `REQUIRE_EXAMPLES=1`. The app is SIGKILLed when this process dies and
//! stopped by pid (SIGTERM, then SIGKILL) when the test ends, also on
//! failure.

mod support;

use participant_check::{OrderSpec, Settings};
use saga_tests::shipping::{ShippingApp, ShippingConfig, ShippingProcess};

const TOKEN: &str = "nestjs-shipping-token";

/// The product the app is told to refuse, and the kit's refused order.
const UNSHIPPABLE: &str = "sku-unshippable";

#[tokio::test]
async fn the_nestjs_shipping_example_passes_every_rule() {
    let Some(app) = ShippingApp::find() else {
        return;
    };
    let Some(target) = saga_tests::backends::mongo() else {
        return;
    };
    let mut config = ShippingConfig::new(&target.uri);
    config.unshippable = vec![UNSHIPPABLE.to_owned()];
    config.service_token = Some(TOKEN.to_owned());
    let shipping = ShippingProcess::start(&app, config)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let mut settings = Settings::new(shipping.addr().to_string());
    settings.step = "shipping".into();
    settings.token = Some(TOKEN.into());
    settings.refused_order = Some(
        OrderSpec::parse(&format!(
            r#"{{"customer_id":"c","lines":[{{"product_id":"{UNSHIPPABLE}","quantity":1,"unit_price_cents":100}}]}}"#
        ))
        .expect("refused order"),
    );
    let report = support::check(settings).await;
    if report.failed() > 0 {
        eprintln!("nestjs-shipping's last log lines:\n{}", shipping.log_tail());
    }
    support::assert_all_pass(&report);
    drop(shipping);
}
