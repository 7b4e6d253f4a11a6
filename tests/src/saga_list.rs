//! Paging through the orchestrator's `ListSagas`. The chaos soak and the
//! load generator both end by asking which sagas are still open (or FAILED);
//! the paging loop lives here once.

use saga_proto::saga::v1 as pb;
use saga_proto::saga::v1::saga_service_client::SagaServiceClient;
use tonic::transport::Channel;

/// Sagas per page.
const PAGE_SIZE: i32 = 500;

/// Every saga in one of `statuses` (grouped in that order), reading at most
/// `max_pages` pages of 500 per status.
pub async fn sagas_in(
    client: &mut SagaServiceClient<Channel>,
    statuses: &[pb::SagaStatus],
    max_pages: usize,
) -> Result<Vec<pb::Saga>, tonic::Status> {
    let mut out = Vec::new();
    for status in statuses {
        let mut token = String::new();
        for _ in 0..max_pages {
            let page = client
                .list_sagas(pb::ListSagasRequest {
                    status: *status as i32,
                    page_size: PAGE_SIZE,
                    page_token: token.clone(),
                    needs_attention: false,
                })
                .await?
                .into_inner();
            out.extend(page.sagas);
            if page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
    }
    Ok(out)
}
