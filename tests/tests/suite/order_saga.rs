//! The order saga end to end, as a user of CreateOrder sees it — on the
//! embedded stores and on MongoDB (emulated unless `MONGODB_URI` is set).

saga_tests::on_every_backend!(
    happy_path_charges_deducts_and_completes,
    payment_refusal_cancels_with_nothing_to_compensate,
    inventory_shortage_refunds_the_payment,
    unknown_product_refunds_the_payment,
    duplicate_create_order_makes_one_saga,
    fifty_concurrent_duplicate_create_orders_make_one_saga_and_one_charge,
    reused_request_id_with_different_parameters_is_refused,
    sagas_can_be_found_by_either_id_and_listed_newest_first_in_pages,
    create_order_without_wait_returns_at_once_and_the_saga_finishes,
);

use saga_proto::saga::v1 as pb;
use saga_tests::{Stack, order_request};
use std::collections::HashSet;

fn step(s: &pb::Saga, name: &str) -> pb::Step {
    s.steps
        .iter()
        .find(|x| x.name == name)
        .cloned()
        .expect("step present")
}

async fn happy_path_charges_deducts_and_completes(stack: Stack) {
    stack.deposit("alice", 10_000).await;
    stack.add_stock("sku-apple", 10).await;
    stack.add_stock("sku-pear", 10).await;

    let reply = stack
        .order(
            "o-1",
            "alice",
            &[("sku-apple", 2, 150), ("sku-pear", 3, 100)],
        )
        .await
        .expect("create order");
    assert_eq!(reply.status(), pb::SagaStatus::Completed);
    assert!(reply.created);
    let saga = reply.saga.expect("saga returned with wait");
    assert_eq!(saga.refusal_code, "", "nothing was refused");
    assert_eq!(saga.order.as_ref().map(|o| o.total_cents), Some(600));
    assert_eq!(step(&saga, "payment").status(), pb::StepStatus::Succeeded);
    assert_eq!(step(&saga, "inventory").status(), pb::StepStatus::Succeeded);
    assert_eq!(
        step(&saga, "payment").request_id,
        format!("{}:payment", saga.saga_id)
    );
    assert_eq!(
        saga.history.last().map(|t| t.to.as_str()),
        Some("completed")
    );

    assert_eq!(stack.balance("alice").await, 9_400);
    assert_eq!(stack.stock("sku-apple").await, 8);
    assert_eq!(stack.stock("sku-pear").await, 7);
    stack.stop().await;
}

async fn payment_refusal_cancels_with_nothing_to_compensate(stack: Stack) {
    stack.deposit("bob", 1_000).await;
    stack.add_stock("sku-apple", 10).await;

    let reply = stack
        .order("o-bob", "bob", &[("sku-apple", 1, 5_000)])
        .await
        .expect("create");
    assert_eq!(reply.status(), pb::SagaStatus::Cancelled);
    let saga = reply.saga.expect("saga");
    assert_eq!(step(&saga, "payment").status(), pb::StepStatus::Refused);
    assert_eq!(step(&saga, "inventory").status(), pb::StepStatus::Skipped);
    assert!(
        saga.reason.contains("insufficient funds"),
        "{}",
        saga.reason
    );
    assert_eq!(
        saga.refusal_code, "INSUFFICIENT_FUNDS",
        "the refusal's ErrorInfo reason"
    );
    assert_eq!(stack.balance("bob").await, 1_000);
    assert_eq!(stack.stock("sku-apple").await, 10);

    // Unknown customer: refused too, nothing charged anywhere.
    let reply = stack
        .order("o-nobody", "nobody", &[("sku-apple", 1, 1)])
        .await
        .expect("create");
    assert_eq!(reply.status(), pb::SagaStatus::Cancelled);
    assert_eq!(reply.saga.expect("saga").refusal_code, "ACCOUNT_NOT_FOUND");
    assert_eq!(stack.stock("sku-apple").await, 10);
    stack.stop().await;
}

async fn inventory_shortage_refunds_the_payment(stack: Stack) {
    stack.deposit("alice", 1_000_000).await;
    stack.add_stock("sku-apple", 100).await;
    stack.add_stock("sku-pear", 3).await;

    let reply = stack
        .order(
            "o-pears",
            "alice",
            &[("sku-apple", 1, 100), ("sku-pear", 5, 200)],
        )
        .await
        .expect("create");
    assert_eq!(reply.status(), pb::SagaStatus::Cancelled);
    let saga = reply.saga.expect("saga");
    let payment = step(&saga, "payment");
    assert_eq!(payment.status(), pb::StepStatus::Compensated);
    assert_eq!(step(&saga, "inventory").status(), pb::StepStatus::Refused);
    assert!(saga.reason.contains("sku-pear"), "{}", saga.reason);
    assert_eq!(saga.refusal_code, "INSUFFICIENT_STOCK");
    let refunds = saga
        .history
        .iter()
        .filter(|t| t.step == "payment" && t.to == "compensated")
        .count();
    assert_eq!(refunds, 1);

    // Money and stock are exactly as before; the refund is in the history.
    assert_eq!(stack.balance("alice").await, 1_000_000);
    assert_eq!(stack.stock("sku-apple").await, 100);
    assert_eq!(stack.stock("sku-pear").await, 3);
    let account = stack
        .payments()
        .await
        .get_account(saga_proto::payment::v1::GetAccountRequest {
            customer_id: "alice".into(),
            operation_limit: 10,
        })
        .await
        .expect("account")
        .into_inner();
    let kinds: Vec<_> = account
        .recent_operations
        .iter()
        .filter(|o| o.request_id == payment.request_id)
        .map(|o| (o.kind.as_str(), o.status.as_str()))
        .collect();
    assert_eq!(kinds, [("refund", "undone"), ("charge", "applied")]);
    stack.stop().await;
}

async fn unknown_product_refunds_the_payment(stack: Stack) {
    stack.deposit("alice", 500).await;
    let reply = stack
        .order("o-ghost", "alice", &[("sku-ghost", 1, 100)])
        .await
        .expect("create");
    assert_eq!(reply.status(), pb::SagaStatus::Cancelled);
    assert_eq!(
        step(&reply.saga.expect("saga"), "payment").status(),
        pb::StepStatus::Compensated
    );
    assert_eq!(stack.balance("alice").await, 500);
    stack.stop().await;
}

async fn duplicate_create_order_makes_one_saga(stack: Stack) {
    stack.deposit("alice", 10_000).await;
    stack.add_stock("sku-apple", 10).await;

    let first = stack
        .order("dup-1", "alice", &[("sku-apple", 1, 100)])
        .await
        .expect("first");
    let second = stack
        .order("dup-1", "alice", &[("sku-apple", 1, 100)])
        .await
        .expect("second");
    assert!(first.created);
    assert!(!second.created);
    assert_eq!(first.saga_id, second.saga_id);
    assert_eq!(second.status(), pb::SagaStatus::Completed);
    assert_eq!(stack.balance("alice").await, 9_900);
    assert_eq!(stack.stock("sku-apple").await, 9);
    stack.stop().await;
}

async fn fifty_concurrent_duplicate_create_orders_make_one_saga_and_one_charge(stack: Stack) {
    stack.deposit("alice", 10_000).await;
    stack.add_stock("sku-apple", 10).await;

    let client = stack.orders().await;
    let calls: Vec<_> = (0..50)
        .map(|i| {
            let mut client = client.clone();
            // Half wait for the end, half return at once.
            let request = order_request("dup-50", "alice", &[("sku-apple", 2, 250)], i % 2 == 0);
            tokio::spawn(async move { client.create_order(request).await.map(|r| r.into_inner()) })
        })
        .collect();
    let mut replies = Vec::new();
    for call in calls {
        replies.push(call.await.expect("join").expect("create order"));
    }
    let ids: HashSet<_> = replies.iter().map(|r| r.saga_id.clone()).collect();
    assert_eq!(ids.len(), 1, "one saga id for all 50 calls");
    assert_eq!(replies.iter().filter(|r| r.created).count(), 1);
    for r in replies.iter().filter(|r| r.saga.is_some()) {
        assert_eq!(r.status(), pb::SagaStatus::Completed);
    }
    let saga_id = ids.into_iter().next().expect("one id");
    saga_tests::wait_terminal(
        stack.orchestrator().addr,
        &saga_id,
        std::time::Duration::from_secs(10),
    )
    .await;

    assert_eq!(stack.balance("alice").await, 9_500, "charged exactly once");
    assert_eq!(stack.stock("sku-apple").await, 8, "deducted exactly once");
    let listed = stack
        .sagas()
        .await
        .list_sagas(pb::ListSagasRequest::default())
        .await
        .expect("list")
        .into_inner();
    assert_eq!(listed.sagas.len(), 1);
    stack.stop().await;
}

async fn reused_request_id_with_different_parameters_is_refused(stack: Stack) {
    stack.deposit("alice", 10_000).await;
    stack.add_stock("sku-apple", 10).await;
    stack
        .order("reuse", "alice", &[("sku-apple", 1, 100)])
        .await
        .expect("first");

    for (items, field) in [
        (
            &[("sku-apple", 2, 100)][..],
            "items[0].quantity: 1 recorded, 2 received",
        ),
        (
            &[("sku-apple", 1, 101)],
            "items[0].unit_price_cents: 100 recorded, 101 received",
        ),
        (
            &[("sku-pear", 1, 100)],
            "items[0].product_id: sku-apple recorded, sku-pear received",
        ),
        (
            &[("sku-apple", 1, 100), ("sku-pear", 1, 1)],
            "items: 1 recorded, 2 received",
        ),
    ] {
        let err = stack
            .order("reuse", "alice", items)
            .await
            .expect_err("reuse refused");
        assert_eq!(err.code(), tonic::Code::AlreadyExists);
        assert!(err.message().contains(field), "{}", err.message());
        // The same, for a program: the ErrorInfo names the reason and field.
        let info = tonic_types::StatusExt::get_details_error_info(&err).expect("ErrorInfo");
        assert_eq!(
            (info.domain.as_str(), info.reason.as_str()),
            ("saga.v1", "REQUEST_ID_REUSED")
        );
        assert_eq!(info.metadata["request_id"], "reuse");
        assert_eq!(
            info.metadata["field"],
            field.split_once(": ").expect("field").0
        );
    }
    let err = stack
        .order("reuse", "bob", &[("sku-apple", 1, 100)])
        .await
        .expect_err("reuse refused");
    assert_eq!(err.code(), tonic::Code::AlreadyExists);
    assert!(
        err.message()
            .contains("customer_id: alice recorded, bob received"),
        "{}",
        err.message()
    );
    assert_eq!(stack.balance("alice").await, 9_900);
    stack.stop().await;
}

async fn sagas_can_be_found_by_either_id_and_listed_newest_first_in_pages(stack: Stack) {
    stack.deposit("alice", 1_000).await;
    stack.deposit("bob", 10).await;
    stack.add_stock("sku-apple", 100).await;

    let mut created = Vec::new();
    for i in 0..5 {
        let customer = if i % 2 == 0 { "alice" } else { "bob" };
        let r = stack
            .order(&format!("list-{i}"), customer, &[("sku-apple", 1, 100)])
            .await
            .expect("create");
        created.push(r.saga_id);
    }
    let mut sagas = stack.sagas().await;
    let by_request = sagas
        .get_saga(pb::GetSagaRequest {
            lookup: Some(pb::get_saga_request::Lookup::RequestId("list-3".into())),
        })
        .await
        .expect("by request id")
        .into_inner();
    assert_eq!(by_request.saga_id, created[3]);
    assert_eq!(by_request.status(), pb::SagaStatus::Cancelled);
    assert!(!by_request.history.is_empty());
    assert!(by_request.created_at.is_some() && by_request.updated_at.is_some());

    // Pages of two, newest first, covering all five exactly once.
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = sagas
            .list_sagas(pb::ListSagasRequest {
                status: 0,
                page_size: 2,
                page_token: token.clone(),
                needs_attention: false,
            })
            .await
            .expect("list")
            .into_inner();
        assert!(page.sagas.len() <= 2);
        seen.extend(page.sagas.into_iter().map(|s| s.saga_id));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let newest_first: Vec<_> = created.iter().rev().cloned().collect();
    assert_eq!(seen, newest_first);

    let completed = sagas
        .list_sagas(pb::ListSagasRequest {
            status: pb::SagaStatus::Completed.into(),
            page_size: 0,
            page_token: String::new(),
            needs_attention: false,
        })
        .await
        .expect("list completed")
        .into_inner();
    let ids: Vec<_> = completed.sagas.iter().map(|s| s.saga_id.clone()).collect();
    assert_eq!(
        ids,
        [created[4].clone(), created[2].clone(), created[0].clone()]
    );

    let missing = sagas
        .get_saga(pb::GetSagaRequest {
            lookup: Some(pb::get_saga_request::Lookup::SagaId("no-such-saga".into())),
        })
        .await
        .expect_err("not found");
    assert_eq!(missing.code(), tonic::Code::NotFound);
    let info = tonic_types::StatusExt::get_details_error_info(&missing).expect("ErrorInfo");
    assert_eq!(
        (info.domain.as_str(), info.reason.as_str()),
        ("saga.v1", "SAGA_NOT_FOUND")
    );
    stack.stop().await;
}

async fn create_order_without_wait_returns_at_once_and_the_saga_finishes(stack: Stack) {
    stack.deposit("alice", 1_000).await;
    stack.add_stock("sku-apple", 5).await;
    let reply = stack
        .orders()
        .await
        .create_order(order_request(
            "nowait",
            "alice",
            &[("sku-apple", 1, 10)],
            false,
        ))
        .await
        .expect("create")
        .into_inner();
    assert!(reply.saga.is_none());
    assert!(reply.order_id.starts_with("order-"));
    let saga = saga_tests::wait_terminal(
        stack.orchestrator().addr,
        &reply.saga_id,
        std::time::Duration::from_secs(10),
    )
    .await;
    assert_eq!(saga.status(), pb::SagaStatus::Completed);
    stack.stop().await;
}
