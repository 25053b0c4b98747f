//! The data path of [`Node`]: produce (with acks and idempotent-producer dedup,
//! and broker-side placement for `partition = -1`), long-polling fetch of
//! committed batches, list offsets; and the producer table rebuilt from a log's
//! tail at start-up.

use super::*;

impl Node {
    pub(super) fn slot(&self, topic_name: &str, partition: i32) -> Result<(Arc<Topic>, usize), ApiError> {
        let topic = self.topic(topic_name)?;
        let count = topic.slots.len();
        if partition < 0 || partition as usize >= count {
            return Err(ApiError::unknown_partition(topic_name, partition, count));
        }
        Ok((topic, partition as usize))
    }

    /// A produce that leaves the partitions to the broker (`partition = -1`):
    /// each record goes where the topic's partitioner plugin says, else to
    /// Kafka's murmur2 partition of its key, else (no key) to one partition per
    /// request in round-robin order — the choices a producer makes. Records are
    /// regrouped into one batch per partition and appended like any produce.
    pub async fn produce_placed(&self, request: ProduceRequest) -> Result<(Produced, Placements), ApiError> {
        let count = self.partition_count(&request.topic)?;
        let corrupt = |error: abi::batch::BatchError| ApiError::new(ErrorCode::CorruptMessage, error.to_string());
        let keyless = (self.round_robin.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % count as u64) as i32;
        let mut groups: BTreeMap<i32, Vec<abi::batch::RecordBatch>> = BTreeMap::new();
        let mut order = Vec::new();
        for view in abi::BatchIter::new(&request.batches) {
            let view = view.map_err(corrupt)?;
            if view.producer_id() >= 0 {
                let message =
                    "an idempotent batch needs an explicit partition (its sequence numbers are per partition)";
                return Err(ApiError::new(ErrorCode::InvalidRequest, message));
            }
            let batch = abi::batch::RecordBatch::decode(view.as_bytes()).map_err(corrupt)?;
            let packed = crate::plugins::pack_view(&view, -1)?;
            let records = packed.records().map_err(|error| ApiError::new(ErrorCode::CorruptMessage, error))?;
            let all: Vec<_> = records.iter().collect();
            let chosen = self.plugins.partitions(&request.topic, count, &all).await?;
            for (index, (record, decoded)) in records.iter().zip(&batch.records).enumerate() {
                let choice = chosen.as_ref().and_then(|chosen| chosen[index]);
                let partition = match (choice, record.key) {
                    (Some(partition), _) => partition as i32,
                    (None, Some(key)) => abi::partitioner::partition_for_key(key, count) as i32,
                    (None, None) => keyless,
                };
                let group = groups.entry(partition).or_default();
                if group.last().is_none_or(|last| last.base_timestamp != batch.base_timestamp) {
                    group.push(abi::batch::RecordBatch { records: Vec::new(), ..batch.clone() });
                }
                let target = group.last_mut().expect("pushed above");
                let mut decoded = decoded.clone();
                decoded.offset_delta = target.records.len() as i32;
                target.records.push(decoded);
                order.push((partition, group.iter().map(|batch| batch.records.len()).sum::<usize>() - 1));
            }
        }
        // Every target partition must be led here before anything is appended: a
        // request half appended and then refused would be retried whole.
        for partition in groups.keys() {
            let (topic, index) = self.slot(&request.topic, *partition)?;
            topic.slots[index].led()?;
        }
        let mut base_offsets = BTreeMap::new();
        let mut log_start_offset = -1;
        for (partition, batches) in groups {
            let mut bytes = Vec::new();
            for mut batch in batches {
                batch.last_offset_delta = batch.records.len() as i32 - 1;
                batch.encode_into(&mut bytes).map_err(corrupt)?;
            }
            let single = ProduceRequest { partition, batches: bytes, ..request.clone() };
            let produced = self.produce(single).await?;
            log_start_offset = produced.log_start_offset;
            base_offsets.insert(partition, produced.base_offset);
        }
        let placed = order
            .into_iter()
            .map(|(partition, index)| {
                let base = base_offsets.get(&partition).copied().unwrap_or(-1);
                (partition, if base < 0 { -1 } else { base + index as i64 })
            })
            .collect();
        Ok((Produced { base_offset: -1, log_start_offset }, placed))
    }

    /// Appends the request's batches and answers as `acks` asks.
    pub async fn produce(&self, mut request: ProduceRequest) -> Result<Produced, ApiError> {
        if request.topic.starts_with("__") {
            let message = format!("{:?} is an internal topic; only the broker writes it", request.topic);
            return Err(ApiError::new(ErrorCode::InvalidTopic, message));
        }
        let (topic, index) = self.slot(&request.topic, request.partition)?;
        let slot = &topic.slots[index];
        let (partition, _, _) = slot.led()?;
        let producer = check_batches(&request.batches)?;
        if request.acks == Acks::All {
            // Refused before anything is appended (Kafka's NOT_ENOUGH_REPLICAS).
            partition.check_min_insync()?;
        }
        // Every produce takes the partition's order lock (at once when no
        // other holds it), so one arriving while another's interceptors run
        // appends after it — also when the interceptors were detached meanwhile.
        let in_order = match slot.produce_order() {
            Some(order) => Some(order.clone().lock_owned().await),
            None => None,
        };
        self.plugins.intercept_produce(&request.topic, request.partition, &mut request.batches).await?;
        // Read again: leadership may have moved while the interceptors ran.
        let (partition, producers, leader_epoch) = slot.led()?;
        let (base_offset, last_offset) = match producer {
            None => {
                let info = partition.append(&mut request.batches, leader_epoch)?;
                (info.base_offset, info.last_offset)
            }
            Some(producer) => {
                let mut producers = lock(producers);
                match producers.check(&producer)? {
                    SequenceCheck::Duplicate { base_offset, last_offset } => (base_offset, last_offset),
                    SequenceCheck::Append => {
                        let info = partition.append(&mut request.batches, leader_epoch)?;
                        producers.record(&producer, info.base_offset, info.last_offset);
                        (info.base_offset, info.last_offset)
                    }
                }
            }
        };
        drop(in_order);
        let timeout_ms = match request.timeout_ms {
            0 => PRODUCE_TIMEOUT_MS_DEFAULT,
            timeout_ms => timeout_ms,
        }
        .min(self.limits.produce_timeout_ms_max);
        let timeout = Duration::from_millis(timeout_ms as u64);
        let deadline = tokio::time::Instant::now() + timeout;
        let always = partition.config().flush_policy == FlushPolicy::Always;
        match request.acks {
            Acks::None => return Ok(Produced { base_offset: -1, log_start_offset: -1 }),
            // `acks=all` waits for the leader's own sync first: a failed sync
            // (the log fenced) answers at once instead of at the deadline.
            Acks::Leader | Acks::All if always => {
                match tokio::time::timeout_at(deadline, partition.wait_durable(last_offset + 1)).await {
                    Ok(durable) => {
                        durable?;
                    }
                    Err(_) => {
                        let message =
                            format!("offsets {base_offset}..={last_offset} not durable within {timeout_ms} ms");
                        return Err(ApiError::new(ErrorCode::RequestTimedOut, message));
                    }
                }
            }
            Acks::Leader | Acks::All => {}
        }
        if request.acks == Acks::All {
            // Committed: on every ISR member as the flush policy counts (on
            // disk under `always`), and still led in the epoch of the append.
            if !partition.wait_committed(last_offset + 1, leader_epoch, deadline).await? {
                // Appended, so never NotEnoughReplicas (which says nothing was).
                let isr = match partition.check_min_insync() {
                    Ok(()) => String::new(),
                    Err(error) => format!(" ({error})"),
                };
                let message = format!(
                    "offsets {base_offset}..={last_offset} were appended but not on every in-sync replica within \
                     {timeout_ms} ms{isr}"
                );
                return Err(ApiError::new(ErrorCode::RequestTimedOut, message));
            }
        }
        let (log_start_offset, _) = partition.offsets()?;
        Ok(Produced { base_offset: base_offset as i64, log_start_offset: log_start_offset as i64 })
    }

    /// The most bytes one fetch answer holds (`limits.fetch_bytes_max`).
    pub fn fetch_bytes_max(&self) -> u32 {
        self.limits.fetch_bytes_max
    }

    /// Reads committed batches from `offset` into the start of `buffer` (which only
    /// grows, so a reused buffer is never zeroed again), waiting up to
    /// `max_wait_ms` for at least `min_bytes`: [`Node::fetch_many`] of one partition.
    pub async fn fetch(&self, request: FetchRequest<'_>, buffer: &mut Vec<u8>) -> Result<Fetched, ApiError> {
        let partition = PartitionFetch {
            topic: request.topic.to_owned(),
            partition: request.partition,
            offset: request.offset,
            max_bytes: request.max_bytes,
        };
        let mut buffers = vec![std::mem::take(buffer)];
        let answers = self
            .fetch_many(
                std::slice::from_ref(&partition),
                request.min_bytes,
                request.max_wait_ms,
                request.max_bytes,
                &mut buffers,
            )
            .await;
        let mut answers = answers;
        self.intercept_fetched(std::slice::from_ref(&partition), None, &mut answers, &mut buffers).await;
        *buffer = buffers.pop().unwrap_or_default();
        answers.into_iter().next().expect("fetch_many answers every partition it is given")
    }

    /// Reads committed batches of several partitions, partition `i` into the start
    /// of `buffers[i]` (grown as needed, never shrunk), at most `max_bytes` in
    /// total, waiting up to `max_wait_ms` until at least `min_bytes` in total are
    /// there. A partition's error is its own answer and ends the wait at once.
    pub async fn fetch_many(
        &self,
        partitions: &[PartitionFetch],
        min_bytes: u32,
        max_wait_ms: u32,
        max_bytes: u32,
        buffers: &mut Vec<Vec<u8>>,
    ) -> Vec<Result<Fetched, ApiError>> {
        buffers.resize_with(partitions.len(), Vec::new);
        let max_wait = Duration::from_millis(max_wait_ms.min(self.limits.fetch_wait_ms_max) as u64);
        let deadline = tokio::time::Instant::now() + max_wait;
        let total_max = max_bytes.clamp(1, self.limits.fetch_bytes_max) as usize;
        let slots: Vec<Result<(Partition, u64), ApiError>> =
            partitions.iter().map(|fetch| self.fetch_slot(fetch)).collect();
        loop {
            let mut total = 0;
            let mut answers = Vec::with_capacity(partitions.len());
            let mut seen = Vec::with_capacity(partitions.len());
            for ((fetch, slot), buffer) in partitions.iter().zip(&slots).zip(buffers.iter_mut()) {
                let answer = slot.clone().and_then(|(partition, offset)| {
                    let budget = (fetch.max_bytes.max(1) as usize).min(total_max.saturating_sub(total));
                    // Past the total, a partition is answered empty (its watermarks only).
                    let (size_bytes, log_start_offset, high_watermark) = match budget {
                        0 => (0, partition.offsets()?.0, partition.high_watermark()),
                        budget => {
                            // A first batch bigger than what is left of the total is only
                            // sent when nothing else is (so a consumer always progresses);
                            // otherwise it is not even read, so entries past a full answer
                            // cost no reads and no buffers.
                            let (_, size_bytes, log_start_offset, high_watermark) =
                                partition.read_committed_prefix(offset, budget, total == 0, buffer)?;
                            (size_bytes, log_start_offset, high_watermark)
                        }
                    };
                    total += size_bytes;
                    seen.push((partition, high_watermark));
                    let (high_watermark, log_start_offset) = (high_watermark as i64, log_start_offset as i64);
                    Ok(Fetched { size_bytes, high_watermark, log_start_offset })
                });
                answers.push(answer);
            }
            let any_error = answers.iter().any(Result::is_err);
            if total >= min_bytes as usize || any_error || tokio::time::Instant::now() >= deadline || seen.is_empty() {
                return answers;
            }
            let waits = seen.iter().map(|(partition, high_watermark)| {
                Box::pin(partition.wait_high_watermark_above(*high_watermark, deadline))
            });
            futures::future::select_all(waits).await;
        }
    }

    pub(super) fn fetch_slot(&self, fetch: &PartitionFetch) -> Result<(Partition, u64), ApiError> {
        let (topic, index) = self.slot(&fetch.topic, fetch.partition)?;
        let (partition, _, _) = topic.slots[index].led()?;
        let offset = u64::try_from(fetch.offset)
            .map_err(|_| ApiError::new(ErrorCode::OffsetOutOfRange, format!("offset {} is negative", fetch.offset)))?;
        Ok((partition.clone(), offset))
    }

    /// The earliest or latest offset, or the first at or after a timestamp (the
    /// high watermark when every record is older). Returns (offset, timestamp ms;
    /// -1 when not known).
    pub fn list_offset(&self, topic_name: &str, partition: i32, query: OffsetQuery) -> Result<(i64, i64), ApiError> {
        let (topic, index) = self.slot(topic_name, partition)?;
        let (partition, _, _) = topic.slots[index].led()?;
        let (log_start_offset, high_watermark) = partition.offsets()?;
        let offset = match query {
            OffsetQuery::Earliest => log_start_offset,
            OffsetQuery::Latest => high_watermark,
            OffsetQuery::Timestamp(timestamp_ms) => partition
                .with_log(|log| log.offset_for_timestamp(timestamp_ms))?
                .map_or(high_watermark, |offset| offset.min(high_watermark)),
        };
        Ok((offset as i64, -1))
    }
}

/// The idempotent-producer table as the log's tail left it (the table itself is
/// kept in memory only).
pub(super) fn rebuild_producer_states(partition: &Partition) -> Result<ProducerStates, ApiError> {
    let mut producers = ProducerStates::new(PRODUCERS_PER_PARTITION_MAX);
    partition.with_log(|log| {
        log.visit_tail_batch_headers(PRODUCER_STATE_REBUILD_BYTES_MAX, |header| replay_header(&mut producers, header))
    })?;
    Ok(producers)
}

/// Records one stored batch header in the producer table (if it has a producer).
pub(super) fn replay_header(producers: &mut ProducerStates, header: &[u8; abi::batch::BATCH_HEADER_BYTES]) {
    use abi::batch::field;
    let producer_id = i64::from_be_bytes(header_field(header, field::PRODUCER_ID));
    if producer_id >= 0 {
        let batch = ProducerBatch {
            producer_id,
            producer_epoch: i16::from_be_bytes(header_field(header, field::PRODUCER_EPOCH)),
            base_sequence: i32::from_be_bytes(header_field(header, field::BASE_SEQUENCE)),
            last_offset_delta: i32::from_be_bytes(header_field(header, field::LAST_OFFSET_DELTA)),
        };
        let base_offset = i64::from_be_bytes(header_field(header, field::BASE_OFFSET)).max(0) as u64;
        producers.record(&batch, base_offset, base_offset + batch.last_offset_delta.max(0) as u64);
    }
}

/// `N` bytes of a batch header at `at` (a field of `abi::batch::field`).
pub(super) fn header_field<const N: usize>(header: &[u8; abi::batch::BATCH_HEADER_BYTES], at: usize) -> [u8; N] {
    let mut bytes = [0u8; N];
    bytes.copy_from_slice(&header[at..at + N]);
    bytes
}

/// Checks every batch header (the CRC is checked by the append) and returns the
/// producer fields when the request comes from an idempotent producer, which
/// must send exactly one batch per request.
pub(super) fn check_batches(bytes: &[u8]) -> Result<Option<ProducerBatch>, ApiError> {
    let corrupt = |error: abi::batch::BatchError| ApiError::new(ErrorCode::CorruptMessage, error.to_string());
    let (first, mut rest) = BatchView::split_first(bytes).map_err(corrupt)?;
    let mut batch = first;
    loop {
        match batch.attributes().compression() {
            Ok(Compression::None | Compression::Lz4 | Compression::Zstd) => {}
            Ok(other) => {
                let message = format!("{} compression is not supported (use none, lz4 or zstd)", other.name());
                return Err(ApiError::new(ErrorCode::UnsupportedCompression, message));
            }
            Err(error) => return Err(corrupt(error)),
        }
        if rest.is_empty() {
            break;
        }
        (batch, rest) = BatchView::split_first(rest).map_err(corrupt)?;
    }
    if first.producer_id() < 0 {
        return Ok(None);
    }
    if first.size_bytes() != bytes.len() {
        let message = "an idempotent produce request must carry exactly one batch";
        return Err(ApiError::new(ErrorCode::InvalidRequest, message));
    }
    Ok(Some(ProducerBatch {
        producer_id: first.producer_id(),
        producer_epoch: first.producer_epoch(),
        base_sequence: first.base_sequence(),
        last_offset_delta: first.last_offset_delta(),
    }))
}
