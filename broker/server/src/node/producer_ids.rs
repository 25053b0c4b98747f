//! Idempotent producer ids on [`Node`]: handed out from blocks the controller
//! commits (`ProducerIdBlock` records), so no two brokers and no restarted broker
//! ever hand one out twice.

use super::*;

/// Producer ids a broker takes from the controller at once.
pub(super) const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

impl Node {
    /// A fresh idempotent producer id (epoch 0).
    pub async fn init_producer_id(&self) -> Result<(i64, i16), ApiError> {
        let mut block = self.producer_ids.lock().await;
        if block.next >= block.end {
            let request =
                ControllerRequest::AllocateProducerIds { broker_id: self.broker.id, count: PRODUCER_ID_BLOCK_SIZE };
            let response = self.request(&request).await?;
            let first = response.value.ok_or_else(|| {
                ApiError::new(ErrorCode::UnknownServerError, "the controller answered without a producer id block")
            })?;
            *block = ProducerIdBlock { next: first, end: first + PRODUCER_ID_BLOCK_SIZE };
        }
        let producer_id = block.next;
        block.next += 1;
        Ok((producer_id, 0))
    }
}

/// Producer ids handed out from the current block.
#[derive(Debug, Default)]
pub(super) struct ProducerIdBlock {
    next: i64,
    end: i64,
}
