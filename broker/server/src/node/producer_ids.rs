//! Idempotent producer ids on [`Node`]: handed out from durable blocks, so a
//! restarted broker never hands one out twice.

use super::*;

impl Node {
    /// A fresh idempotent producer id (epoch 0). Ids come from durable blocks, so
    /// a restarted broker never hands one out twice.
    pub fn init_producer_id(&self) -> Result<(i64, i16), ApiError> {
        let mut block = lock(&self.producer_ids);
        if block.next >= block.end {
            let first = lock(&self.metadata).allocate_producer_id_block().map_err(storage_error)?;
            *block = ProducerIdBlock { next: first, end: first + PRODUCER_ID_BLOCK_SIZE };
        }
        let producer_id = block.next;
        block.next += 1;
        Ok((producer_id, 0))
    }
}

/// Producer ids handed out from the current durable block.
#[derive(Debug, Default)]
pub(super) struct ProducerIdBlock {
    next: i64,
    end: i64,
}
