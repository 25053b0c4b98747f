//! The Cap'n Proto edge: `Broker` and `Admin` capabilities (see
//! `abi/schema/weir.capnp`) that decode each call into [`crate::node`] request
//! types, run it, and encode the answer.
//!
//! Runs on a connection thread's `LocalSet` (capnp-rpc is `!Send`); the only
//! shared state is the `Arc<Node>`. Each connection has its own [`CallGate`]: more
//! than `in_flight_calls_max` calls at once are refused with an `overloaded` RPC
//! error (clients map it to `ResourceExhausted`) instead of queueing unboundedly.
//! Fetches reserve room for their answers in the connection's answer budget before
//! they read, and big answers are counted until written (see `transport.rs`), so a
//! peer that does not read its answers cannot make them pile up.
//!
//! Failures of a request are answered in the result's `error` field with a code
//! from the `ErrorCode` table; RPC-level errors are reserved for malformed calls
//! (a missing field, an unknown enum value) and overload.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use abi::weir_capnp::{admin, broker, error, offset_query, partition_metadata, Acks};
use broker_core::group::assignor::TopicPartition as GroupPartition;
use broker_core::group::coordinator::{CommitRequest, HeartbeatRequest};
use broker_core::group::record::OffsetValue;

use crate::error::ApiError;
use crate::node::{self, Node, OffsetQuery, PartitionInfo};
use crate::plugins::PluginSummary;
use crate::transport::{CallActivity, ConnectionState};

/// Counts a connection's calls in flight; see the module docs.
#[derive(Debug)]
pub struct CallGate {
    in_flight: Cell<usize>,
    in_flight_max: usize,
    /// The connection's byte edge: answer room, idleness.
    connection: Rc<ConnectionState>,
}

/// Holds one slot of a [`CallGate`] until dropped.
struct CallPermit(Rc<CallGate>, #[allow(dead_code)] CallActivity);

impl CallGate {
    pub fn new(in_flight_max: usize, connection: Rc<ConnectionState>) -> Rc<CallGate> {
        Rc::new(CallGate { in_flight: Cell::new(0), in_flight_max, connection })
    }

    fn enter(self: &Rc<Self>) -> Result<CallPermit, capnp::Error> {
        let in_flight = self.in_flight.get();
        if in_flight >= self.in_flight_max {
            return Err(capnp::Error::overloaded(format!(
                "more than {} calls in flight on this connection",
                self.in_flight_max
            )));
        }
        self.in_flight.set(in_flight + 1);
        Ok(CallPermit(self.clone(), self.connection.call_started()))
    }
}

impl Drop for CallPermit {
    fn drop(&mut self) {
        self.0.in_flight.set(self.0.in_flight.get() - 1);
        // Every answer holds memory until written; bigger answers add their own
        // size on top.
        self.0.connection.answered(ANSWER_OVERHEAD_BYTES);
    }
}

/// What every answer counts, at least, in the connection's unsent bytes. It must
/// not exceed the bytes the smallest answer puts on the wire (frame header, the
/// RPC message and its Return: over 40 bytes): writes subtract what they write, so
/// a larger figure would drift upwards on a busy connection until reading stopped
/// for good. (An unsent small answer holds more memory than this — capnp
/// allocates about 800 bytes for it — so this bounds piled-up small answers only
/// loosely.)
const ANSWER_OVERHEAD_BYTES: usize = 32;

/// The bootstrap capability of one connection.
#[derive(Debug)]
pub struct BrokerService {
    node: Arc<Node>,
    gate: Rc<CallGate>,
}

impl BrokerService {
    pub fn new(node: Arc<Node>, gate: Rc<CallGate>) -> BrokerService {
        BrokerService { node, gate }
    }
}

#[derive(Debug)]
struct AdminService {
    node: Arc<Node>,
    gate: Rc<CallGate>,
}

/// Most topics one `metadata` call may name (none names every topic).
const METADATA_TOPICS_MAX: usize = 10_000;

/// Room a fetch reserves for its answer: what it asked for, within the broker's
/// cap (a first batch bigger than that is counted when built).
fn answer_bytes_max(node: &Node, max_bytes: u32) -> usize {
    max_bytes.clamp(1, node.fetch_bytes_max()) as usize
}

/// Fetch read buffers kept per connection thread (at most this many).
const FETCH_BUFFERS_MAX: usize = 8;

thread_local! {
    /// Reused so multi-MiB fetch reads are not zeroed and page-faulted anew each time.
    static FETCH_BUFFERS: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn take_fetch_buffer() -> Vec<u8> {
    FETCH_BUFFERS.with(|buffers| buffers.borrow_mut().pop()).unwrap_or_default()
}

fn give_back_fetch_buffer(buffer: Vec<u8>) {
    FETCH_BUFFERS.with(|buffers| {
        let mut buffers = buffers.borrow_mut();
        if buffers.len() < FETCH_BUFFERS_MAX {
            buffers.push(buffer);
        }
    });
}

fn set_plugin_summary(mut builder: abi::weir_capnp::plugin_summary::Builder<'_>, plugin: &PluginSummary) {
    builder.set_name(&plugin.name[..]);
    builder.set_hook(plugin.hook);
    builder.set_digest(&plugin.digest[..]);
    builder.set_size_bytes(plugin.size_bytes);
    builder.set_uploaded_ms(plugin.uploaded_ms);
    builder.set_calls(plugin.calls);
    builder.set_errors(plugin.errors);
    builder.set_traps(plugin.traps);
    builder.set_busy_nanos(plugin.busy_nanos);
    builder.set_client_calls(plugin.client_calls);
    builder.set_client_errors(plugin.client_errors);
    builder.set_state(plugin.state);
    builder.set_state_reason(&plugin.state_reason[..]);
    let mut topics = builder.init_attached_to(plugin.attached_to.len() as u32);
    for (index, topic) in plugin.attached_to.iter().enumerate() {
        topics.set(index as u32, &topic[..]);
    }
}

fn text(reader: capnp::text::Reader<'_>) -> Result<String, capnp::Error> {
    Ok(reader.to_str()?.to_owned())
}

fn set_error(builder: error::Builder<'_>, api_error: &ApiError) {
    let mut builder = builder;
    builder.set_code(api_error.code.as_u16());
    builder.set_message(&api_error.message[..]);
}

fn set_partitions(mut list: capnp::struct_list::Builder<'_, partition_metadata::Owned>, infos: &[PartitionInfo]) {
    for (index, info) in infos.iter().enumerate() {
        let mut builder = list.reborrow().get(index as u32);
        builder.set_partition(info.partition);
        builder.set_leader(info.leader);
        builder.set_leader_epoch(info.leader_epoch);
        let mut replicas = builder.reborrow().init_replicas(info.replicas.len() as u32);
        for (slot, replica) in info.replicas.iter().enumerate() {
            replicas.set(slot as u32, *replica);
        }
        let mut isr = builder.reborrow().init_isr(info.isr.len() as u32);
        for (slot, replica) in info.isr.iter().enumerate() {
            isr.set(slot as u32, *replica);
        }
        if let Some(target) = &info.target_replicas {
            let mut list = builder.reborrow().init_target_replicas(target.len() as u32);
            for (slot, replica) in target.iter().enumerate() {
                list.set(slot as u32, *replica);
            }
        }
        if let Some(api_error) = &info.error {
            set_error(builder.init_error(), api_error);
        }
    }
}

fn read_partitions(
    list: capnp::struct_list::Reader<'_, abi::weir_capnp::topic_partition::Owned>,
) -> Result<Vec<GroupPartition>, capnp::Error> {
    list.iter()
        .map(|entry| {
            let partition = u32::try_from(entry.get_partition())
                .map_err(|_| capnp::Error::failed(format!("negative partition {}", entry.get_partition())))?;
            Ok(GroupPartition { topic: text(entry.get_topic()?)?, partition })
        })
        .collect()
}

fn set_group_partitions(
    mut list: capnp::struct_list::Builder<'_, abi::weir_capnp::topic_partition::Owned>,
    partitions: &[GroupPartition],
) {
    for (index, partition) in partitions.iter().enumerate() {
        let mut entry = list.reborrow().get(index as u32);
        entry.set_topic(&partition.topic[..]);
        entry.set_partition(partition.partition as i32);
    }
}

fn read_offset_entries(
    list: capnp::struct_list::Reader<'_, abi::weir_capnp::offset_commit_entry::Owned>,
) -> Result<Vec<(GroupPartition, i64, String)>, capnp::Error> {
    list.iter()
        .map(|entry| {
            let partition = u32::try_from(entry.get_partition())
                .map_err(|_| capnp::Error::failed(format!("negative partition {}", entry.get_partition())))?;
            let key = GroupPartition { topic: text(entry.get_topic()?)?, partition };
            Ok((key, entry.get_offset(), text(entry.get_metadata()?)?))
        })
        .collect()
}

fn set_committed(
    mut list: capnp::struct_list::Builder<'_, abi::weir_capnp::committed_offset::Owned>,
    offsets: &[(GroupPartition, OffsetValue)],
) {
    for (index, (partition, offset)) in offsets.iter().enumerate() {
        let mut entry = list.reborrow().get(index as u32);
        entry.set_topic(&partition.topic[..]);
        entry.set_partition(partition.partition as i32);
        entry.set_offset(offset.offset);
        entry.set_metadata(&offset.metadata[..]);
        entry.set_commit_timestamp_ms(offset.commit_timestamp_ms);
    }
}

fn wire_acks(acks: Acks) -> node::Acks {
    match acks {
        Acks::None => node::Acks::None,
        Acks::Leader => node::Acks::Leader,
        Acks::All => node::Acks::All,
    }
}

/// One partition's produce (`partition = -1`: placed by the broker).
async fn produce_one(
    node: &Node,
    request: node::ProduceRequest,
) -> Result<(node::Produced, node::Placements), ApiError> {
    match request.partition {
        -1 => node.produce_placed(request).await,
        _ => node.produce(request).await.map(|produced| (produced, Vec::new())),
    }
}

fn set_produce_response(
    mut response: abi::weir_capnp::produce_response::Builder<'_>,
    outcome: &Result<(node::Produced, node::Placements), ApiError>,
) {
    response.set_log_append_time_ms(-1);
    match outcome {
        Ok((produced, placed)) => {
            response.set_base_offset(produced.base_offset);
            response.set_log_start_offset(produced.log_start_offset);
            let mut list = response.init_placed(placed.len() as u32);
            for (index, (partition, offset)) in placed.iter().enumerate() {
                let mut entry = list.reborrow().get(index as u32);
                entry.set_partition(*partition);
                entry.set_offset(*offset);
            }
        }
        Err(api_error) => {
            response.set_base_offset(-1);
            response.set_log_start_offset(-1);
            set_error(response.init_error(), api_error);
        }
    }
}

fn config_entries(
    reader: capnp::struct_list::Reader<'_, abi::weir_capnp::config_entry::Owned>,
) -> Result<Vec<(String, String)>, capnp::Error> {
    reader.iter().map(|entry| Ok((text(entry.get_key()?)?, text(entry.get_value()?)?))).collect()
}

impl broker::Server for BrokerService {
    async fn metadata(
        self: Rc<Self>,
        params: broker::MetadataParams,
        mut results: broker::MetadataResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let requested = params.get()?.get_topics()?;
        if requested.len() as usize > METADATA_TOPICS_MAX {
            return Err(capnp::Error::failed(format!(
                "a metadata call names {} topics; at most {METADATA_TOPICS_MAX} per call (name none for all)",
                requested.len()
            )));
        }
        let mut names = requested.iter().map(|name| text(name?)).collect::<Result<Vec<_>, _>>()?;
        // Each name is answered once, however often it is asked for.
        let mut seen = std::collections::HashSet::new();
        names.retain(|name| seen.insert(name.clone()));
        drop(seen);
        let info = self.node.metadata(&names);
        let mut metadata = results.get().init_metadata();
        metadata.set_controller_id(info.controller_id);
        let mut brokers = metadata.reborrow().init_brokers(info.brokers.len() as u32);
        for (index, entry) in info.brokers.iter().enumerate() {
            let mut builder = brokers.reborrow().get(index as u32);
            builder.set_id(entry.id);
            builder.set_host(&entry.host[..]);
            builder.set_port(entry.port);
        }
        let mut topics = metadata.init_topics(info.topics.len() as u32);
        for (index, topic) in info.topics.iter().enumerate() {
            let mut builder = topics.reborrow().get(index as u32);
            builder.set_name(&topic.name[..]);
            set_partitions(builder.reborrow().init_partitions(topic.partitions.len() as u32), &topic.partitions);
            if let Some(setting) = &topic.partitioner {
                let mut partitioner = builder.reborrow().init_partitioner();
                partitioner.set_plugin(&setting.plugin[..]);
                partitioner.set_digest(&setting.digest[..]);
                let mut entries = partitioner.init_config(setting.config.len() as u32);
                for (position, (key, value)) in setting.config.iter().enumerate() {
                    let mut entry = entries.reborrow().get(position as u32);
                    entry.set_key(&key[..]);
                    entry.set_value(&value[..]);
                }
            }
            if let Some(api_error) = &topic.error {
                set_error(builder.init_error(), api_error);
            }
        }
        self.gate.connection.answered(results.get().total_size()?.word_count as usize * 8);
        Ok(())
    }

    async fn admin(
        self: Rc<Self>,
        _: broker::AdminParams,
        mut results: broker::AdminResults,
    ) -> Result<(), capnp::Error> {
        let service = AdminService { node: self.node.clone(), gate: self.gate.clone() };
        results.get().set_admin(capnp_rpc::new_client(service));
        Ok(())
    }

    async fn produce(
        self: Rc<Self>,
        params: broker::ProduceParams,
        mut results: broker::ProduceResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let request = {
            let reader = params.get()?.get_request()?;
            node::ProduceRequest {
                topic: text(reader.get_topic()?)?,
                partition: reader.get_partition(),
                acks: wire_acks(reader.get_acks()?),
                timeout_ms: reader.get_timeout_ms(),
                batches: reader.get_batches()?.to_vec(),
            }
        };
        drop(params);
        let outcome = produce_one(&self.node, request).await;
        set_produce_response(results.get().init_response(), &outcome);
        Ok(())
    }

    async fn produce_many(
        self: Rc<Self>,
        params: broker::ProduceManyParams,
        mut results: broker::ProduceManyResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let requests = {
            let reader = params.get()?.get_request()?;
            let acks = wire_acks(reader.get_acks()?);
            let timeout_ms = reader.get_timeout_ms();
            reader
                .get_partitions()?
                .iter()
                .map(|entry| {
                    Ok(node::ProduceRequest {
                        topic: text(entry.get_topic()?)?,
                        partition: entry.get_partition(),
                        acks,
                        timeout_ms,
                        batches: entry.get_batches()?.to_vec(),
                    })
                })
                .collect::<Result<Vec<_>, capnp::Error>>()?
        };
        drop(params);
        // Polled in request order, so entries for one partition append in that
        // order (an append happens before the first await that can wait).
        let outcomes =
            futures::future::join_all(requests.into_iter().map(|request| produce_one(&self.node, request))).await;
        let mut list = results.get().init_responses(outcomes.len() as u32);
        for (index, outcome) in outcomes.iter().enumerate() {
            set_produce_response(list.reborrow().get(index as u32), outcome);
        }
        Ok(())
    }

    async fn fetch(
        self: Rc<Self>,
        params: broker::FetchParams,
        mut results: broker::FetchResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let (topic, request) = {
            let reader = params.get()?.get_request()?;
            let topic = text(reader.get_topic()?)?;
            (topic, reader)
        };
        let fetch = node::FetchRequest {
            topic: &topic,
            partition: request.get_partition(),
            offset: request.get_offset(),
            max_bytes: request.get_max_bytes(),
            min_bytes: request.get_min_bytes(),
            max_wait_ms: request.get_max_wait_ms(),
        };
        let room = self.gate.connection.reserve_answer(answer_bytes_max(&self.node, fetch.max_bytes)).await;
        let mut buffer = take_fetch_buffer();
        let outcome = self.node.fetch(fetch, &mut buffer).await;
        let mut response = results.get().init_response();
        match outcome {
            Ok(fetched) => {
                room.built(fetched.size_bytes);
                response.set_batches(&buffer[..fetched.size_bytes]);
                response.set_high_watermark(fetched.high_watermark);
                response.set_log_start_offset(fetched.log_start_offset);
            }
            Err(api_error) => {
                response.set_high_watermark(-1);
                response.set_log_start_offset(-1);
                set_error(response.init_error(), &api_error);
            }
        }
        give_back_fetch_buffer(buffer);
        Ok(())
    }

    async fn fetch_many(
        self: Rc<Self>,
        params: broker::FetchManyParams,
        mut results: broker::FetchManyResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let (partitions, min_bytes, max_wait_ms, max_bytes, group) = {
            let request = params.get()?.get_request()?;
            let partitions = request
                .get_partitions()?
                .iter()
                .map(|fetch| {
                    Ok(node::PartitionFetch {
                        topic: text(fetch.get_topic()?)?,
                        partition: fetch.get_partition(),
                        offset: fetch.get_offset(),
                        max_bytes: fetch.get_max_bytes(),
                    })
                })
                .collect::<Result<Vec<_>, capnp::Error>>()?;
            let group = text(request.get_group_id()?)?;
            let group = (!group.is_empty()).then_some(group);
            (partitions, request.get_min_bytes(), request.get_max_wait_ms(), request.get_max_bytes(), group)
        };
        drop(params);
        let room = self.gate.connection.reserve_answer(answer_bytes_max(&self.node, max_bytes)).await;
        let mut buffers: Vec<Vec<u8>> = (0..partitions.len()).map(|_| take_fetch_buffer()).collect();
        let mut answers = self.node.fetch_many(&partitions, min_bytes, max_wait_ms, max_bytes, &mut buffers).await;
        self.node.intercept_fetched(&partitions, group.as_deref(), &mut answers, &mut buffers).await;
        room.built(answers.iter().flatten().map(|fetched| fetched.size_bytes).sum());
        let mut list = results.get().init_partitions(partitions.len() as u32);
        for (index, ((fetch, answer), buffer)) in partitions.iter().zip(&answers).zip(&buffers).enumerate() {
            let mut data = list.reborrow().get(index as u32);
            data.set_topic(&fetch.topic[..]);
            data.set_partition(fetch.partition);
            match answer {
                Ok(fetched) => {
                    data.set_batches(&buffer[..fetched.size_bytes]);
                    data.set_high_watermark(fetched.high_watermark);
                    data.set_log_start_offset(fetched.log_start_offset);
                }
                Err(api_error) => {
                    data.set_high_watermark(-1);
                    data.set_log_start_offset(-1);
                    set_error(data.init_error(), api_error);
                }
            }
        }
        buffers.into_iter().for_each(give_back_fetch_buffer);
        Ok(())
    }

    async fn group_heartbeat(
        self: Rc<Self>,
        params: broker::GroupHeartbeatParams,
        mut results: broker::GroupHeartbeatResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let request = {
            let reader = params.get()?.get_request()?;
            let instance_id = text(reader.get_instance_id()?)?;
            let assignor = text(reader.get_assignor()?)?;
            HeartbeatRequest {
                group_id: text(reader.get_group_id()?)?,
                member_id: text(reader.get_member_id()?)?,
                instance_id: (!instance_id.is_empty()).then_some(instance_id),
                member_epoch: reader.get_member_epoch(),
                subscribed_topics: match reader.get_subscription_changed() {
                    true => Some(
                        reader.get_subscribed_topics()?.iter().map(|topic| text(topic?)).collect::<Result<_, _>>()?,
                    ),
                    false => None,
                },
                assignor: (!assignor.is_empty()).then_some(assignor),
                owned: match reader.get_owned_reported() {
                    true => Some(read_partitions(reader.get_owned()?)?),
                    false => None,
                },
                session_timeout_ms: Some(reader.get_session_timeout_ms()).filter(|timeout| *timeout > 0),
            }
        };
        drop(params);
        let outcome = self.node.group_heartbeat(&request).await;
        let mut response = results.get().init_response();
        match outcome {
            Ok(answer) => {
                response.set_member_id(&answer.member_id[..]);
                response.set_member_epoch(answer.member_epoch);
                response.set_heartbeat_interval_ms(answer.heartbeat_interval_ms);
                set_group_partitions(response.init_assignment(answer.assignment.len() as u32), &answer.assignment);
            }
            Err(api_error) => set_error(response.init_error(), &api_error),
        }
        Ok(())
    }

    async fn commit_offsets(
        self: Rc<Self>,
        params: broker::CommitOffsetsParams,
        mut results: broker::CommitOffsetsResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let request = {
            let reader = params.get()?;
            CommitRequest {
                group_id: text(reader.get_group_id()?)?,
                member_id: text(reader.get_member_id()?)?,
                member_epoch: reader.get_member_epoch(),
                offsets: read_offset_entries(reader.get_offsets()?)?,
                leader_epoch: None,
            }
        };
        drop(params);
        if let Err(api_error) = self.node.commit_offsets(&request).await {
            set_error(results.get().init_error(), &api_error);
        }
        Ok(())
    }

    async fn fetch_offsets(
        self: Rc<Self>,
        params: broker::FetchOffsetsParams,
        mut results: broker::FetchOffsetsResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let (group_id, partitions) = {
            let reader = params.get()?;
            (text(reader.get_group_id()?)?, read_partitions(reader.get_partitions()?)?)
        };
        drop(params);
        let wanted = (!partitions.is_empty()).then_some(&partitions[..]);
        match self.node.fetch_offsets(&group_id, wanted).await {
            Ok(offsets) => set_committed(results.get().init_offsets(offsets.len() as u32), &offsets),
            Err(api_error) => set_error(results.get().init_error(), &api_error),
        }
        Ok(())
    }

    async fn find_coordinator(
        self: Rc<Self>,
        params: broker::FindCoordinatorParams,
        mut results: broker::FindCoordinatorResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let group_id = text(params.get()?.get_group_id()?)?;
        match self.node.find_coordinator(&group_id) {
            Ok(coordinator) => {
                let mut builder = results.get().init_coordinator();
                builder.set_id(coordinator.id);
                builder.set_host(&coordinator.host[..]);
                builder.set_port(coordinator.port);
            }
            Err(api_error) => set_error(results.get().init_error(), &api_error),
        }
        Ok(())
    }

    async fn controller_call(
        self: Rc<Self>,
        params: broker::ControllerCallParams,
        results: broker::ControllerCallResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let kind = params.get()?.get_kind()?.to_str().unwrap_or_default().to_owned();
        let broker_call = crate::controller::network::RaftCallKind::parse(&kind).filter(|kind| kind.is_broker_call());
        if let Some(kind) = broker_call {
            // Served by this broker (plugin bytes, a forwarded produce, a
            // follower's fetch, …), not by its controller.
            let payload = params.get()?.get_payload()?.to_vec();
            drop(params);
            let mut results = results;
            match self.node.answer_broker_call(kind, payload).await {
                Ok(answer) => {
                    self.gate.connection.answered(answer.len());
                    results.get().set_payload(&answer);
                }
                Err(api_error) => set_error(results.get().init_error(), &api_error),
            }
            return Ok(());
        }
        let answered = answer_controller_call(self.node.controller(), params, results).await?;
        self.gate.connection.answered(answered);
        Ok(())
    }

    async fn list_offset(
        self: Rc<Self>,
        params: broker::ListOffsetParams,
        mut results: broker::ListOffsetResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let params = params.get()?;
        let query = match params.get_query()?.which()? {
            offset_query::Earliest(()) => OffsetQuery::Earliest,
            offset_query::Latest(()) => OffsetQuery::Latest,
            offset_query::TimestampMs(timestamp_ms) => OffsetQuery::Timestamp(timestamp_ms),
        };
        let topic = text(params.get_topic()?)?;
        let mut builder = results.get();
        match self.node.list_offset(&topic, params.get_partition(), query) {
            Ok((offset, timestamp_ms)) => {
                builder.set_offset(offset);
                builder.set_timestamp_ms(timestamp_ms);
            }
            Err(api_error) => {
                builder.set_offset(-1);
                builder.set_timestamp_ms(-1);
                set_error(builder.init_error(), &api_error);
            }
        }
        Ok(())
    }

    async fn init_producer_id(
        self: Rc<Self>,
        _: broker::InitProducerIdParams,
        mut results: broker::InitProducerIdResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let builder = results.get();
        match self.node.init_producer_id().await {
            Ok((producer_id, producer_epoch)) => {
                let mut id = builder.init_id();
                id.set_producer_id(producer_id);
                id.set_producer_epoch(producer_epoch);
            }
            Err(api_error) => set_error(builder.init_error(), &api_error),
        }
        Ok(())
    }
}

impl admin::Server for AdminService {
    async fn create_topic(
        self: Rc<Self>,
        params: admin::CreateTopicParams,
        mut results: admin::CreateTopicResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let spec = params.get()?.get_spec()?;
        let configs = config_entries(spec.get_configs()?)?;
        let name = text(spec.get_name()?)?;
        let (partition_count, replication_factor) = (spec.get_partition_count(), spec.get_replication_factor());
        let outcome = self.node.create_topic(&name, partition_count, replication_factor, &configs).await;
        if let Err(api_error) = outcome {
            set_error(results.get().init_error(), &api_error);
        }
        Ok(())
    }

    async fn delete_topic(
        self: Rc<Self>,
        params: admin::DeleteTopicParams,
        mut results: admin::DeleteTopicResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let name = text(params.get()?.get_name()?)?;
        if let Err(api_error) = self.node.delete_topic(&name).await {
            set_error(results.get().init_error(), &api_error);
        }
        Ok(())
    }

    async fn list_topics(
        self: Rc<Self>,
        _: admin::ListTopicsParams,
        mut results: admin::ListTopicsResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let names = self.node.list_topics();
        let mut list = results.get().init_names(names.len() as u32);
        for (index, name) in names.iter().enumerate() {
            list.set(index as u32, &name[..]);
        }
        Ok(())
    }

    async fn describe_topic(
        self: Rc<Self>,
        params: admin::DescribeTopicParams,
        mut results: admin::DescribeTopicResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let name = text(params.get()?.get_name()?)?;
        match self.node.describe_topic(&name) {
            Ok(description) => {
                let mut builder = results.get().init_description();
                builder.set_name(&description.name[..]);
                set_partitions(
                    builder.reborrow().init_partitions(description.partitions.len() as u32),
                    &description.partitions,
                );
                let mut configs = builder.init_configs(description.configs.len() as u32);
                for (index, (key, value)) in description.configs.iter().enumerate() {
                    let mut entry = configs.reborrow().get(index as u32);
                    entry.set_key(&key[..]);
                    entry.set_value(&value[..]);
                }
            }
            Err(api_error) => set_error(results.get().init_error(), &api_error),
        }
        Ok(())
    }

    async fn alter_topic_config(
        self: Rc<Self>,
        params: admin::AlterTopicConfigParams,
        mut results: admin::AlterTopicConfigResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let params = params.get()?;
        let name = text(params.get_name()?)?;
        let configs = config_entries(params.get_configs()?)?;
        if let Err(api_error) = self.node.alter_topic_config(&name, &configs).await {
            set_error(results.get().init_error(), &api_error);
        }
        Ok(())
    }

    async fn list_groups(
        self: Rc<Self>,
        _: admin::ListGroupsParams,
        mut results: admin::ListGroupsResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let groups = self.node.list_groups();
        let mut list = results.get().init_groups(groups.len() as u32);
        for (index, (group_id, state, member_count)) in groups.iter().enumerate() {
            let mut entry = list.reborrow().get(index as u32);
            entry.set_group_id(&group_id[..]);
            entry.set_state(state.name());
            entry.set_member_count(*member_count as u32);
        }
        Ok(())
    }

    async fn describe_group(
        self: Rc<Self>,
        params: admin::DescribeGroupParams,
        mut results: admin::DescribeGroupResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let group_id = text(params.get()?.get_group_id()?)?;
        match self.node.describe_group(&group_id).await {
            Ok(description) => {
                let mut builder = results.get().init_description();
                builder.set_group_id(&description.group_id[..]);
                builder.set_state(description.state.name());
                builder.set_group_epoch(description.group_epoch);
                builder.set_assignor(&description.assignor[..]);
                let mut members = builder.reborrow().init_members(description.members.len() as u32);
                for (index, member) in description.members.iter().enumerate() {
                    let mut entry = members.reborrow().get(index as u32);
                    entry.set_member_id(&member.member_id[..]);
                    entry.set_instance_id(member.instance_id.as_deref().unwrap_or(""));
                    entry.set_member_epoch(member.member_epoch);
                    let mut topics = entry.reborrow().init_subscribed_topics(member.subscribed_topics.len() as u32);
                    for (slot, topic) in member.subscribed_topics.iter().enumerate() {
                        topics.set(slot as u32, &topic[..]);
                    }
                    set_group_partitions(
                        entry.reborrow().init_assigned(member.assigned.len() as u32),
                        &member.assigned,
                    );
                    set_group_partitions(entry.init_target(member.target.len() as u32), &member.target);
                }
                set_committed(builder.init_offsets(description.offsets.len() as u32), &description.offsets);
            }
            Err(api_error) => set_error(results.get().init_error(), &api_error),
        }
        Ok(())
    }

    async fn delete_group(
        self: Rc<Self>,
        params: admin::DeleteGroupParams,
        mut results: admin::DeleteGroupResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let group_id = text(params.get()?.get_group_id()?)?;
        if let Err(api_error) = self.node.delete_group(&group_id).await {
            set_error(results.get().init_error(), &api_error);
        }
        Ok(())
    }

    async fn reset_offsets(
        self: Rc<Self>,
        params: admin::ResetOffsetsParams,
        mut results: admin::ResetOffsetsResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let (group_id, offsets) = {
            let reader = params.get()?;
            let offsets = read_offset_entries(reader.get_offsets()?)?;
            (
                text(reader.get_group_id()?)?,
                offsets.into_iter().map(|(partition, offset, _)| (partition, offset)).collect::<Vec<_>>(),
            )
        };
        drop(params);
        if let Err(api_error) = self.node.reset_group_offsets(&group_id, &offsets).await {
            set_error(results.get().init_error(), &api_error);
        }
        Ok(())
    }

    async fn upload_plugin(
        self: Rc<Self>,
        params: admin::UploadPluginParams,
        mut results: admin::UploadPluginResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let (name, hook, wasm) = {
            let reader = params.get()?;
            (text(reader.get_name()?)?, text(reader.get_hook()?)?, reader.get_wasm()?.to_vec())
        };
        drop(params);
        // Compiling takes tens to hundreds of milliseconds: `upload_plugin` does
        // it off this thread.
        match self.node.upload_plugin(&name, &hook, wasm).await {
            Ok(plugin) => set_plugin_summary(results.get().init_plugin(), &plugin),
            Err(api_error) => set_error(results.get().init_error(), &api_error),
        }
        Ok(())
    }

    async fn list_plugins(
        self: Rc<Self>,
        _: admin::ListPluginsParams,
        mut results: admin::ListPluginsResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let plugins = self.node.plugins().list();
        let mut list = results.get().init_plugins(plugins.len() as u32);
        for (index, plugin) in plugins.iter().enumerate() {
            set_plugin_summary(list.reborrow().get(index as u32), plugin);
        }
        Ok(())
    }

    async fn delete_plugin(
        self: Rc<Self>,
        params: admin::DeletePluginParams,
        mut results: admin::DeletePluginResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let name = text(params.get()?.get_name()?)?;
        if let Err(api_error) = self.node.delete_plugin(&name).await {
            set_error(results.get().init_error(), &api_error);
        }
        Ok(())
    }

    async fn plugin_logs(
        self: Rc<Self>,
        params: admin::PluginLogsParams,
        mut results: admin::PluginLogsResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let name = text(params.get()?.get_name()?)?;
        match self.node.plugins().logs(&name) {
            Ok(entries) => {
                let mut list = results.get().init_entries(entries.len() as u32);
                for (index, entry) in entries.iter().enumerate() {
                    let mut builder = list.reborrow().get(index as u32);
                    builder.set_unix_ms(entry.unix_ms);
                    builder.set_level(entry.level);
                    builder.set_message(&entry.message[..]);
                }
            }
            Err(error) => set_error(results.get().init_error(), &ApiError::from(error)),
        }
        Ok(())
    }

    async fn attach_plugin(
        self: Rc<Self>,
        params: admin::AttachPluginParams,
        mut results: admin::AttachPluginResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let (topic, hook, plugin, config, policy) = {
            let reader = params.get()?;
            (
                text(reader.get_topic()?)?,
                text(reader.get_hook()?)?,
                text(reader.get_plugin()?)?,
                config_entries(reader.get_config()?)?,
                text(reader.get_failure_policy()?)?,
            )
        };
        if let Err(api_error) = self.node.attach_plugin(&topic, &hook, &plugin, config, &policy).await {
            set_error(results.get().init_error(), &api_error);
        }
        Ok(())
    }

    async fn detach_plugin(
        self: Rc<Self>,
        params: admin::DetachPluginParams,
        mut results: admin::DetachPluginResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let (topic, hook, plugin) = {
            let reader = params.get()?;
            (text(reader.get_topic()?)?, text(reader.get_hook()?)?, text(reader.get_plugin()?)?)
        };
        if let Err(api_error) = self.node.detach_plugin(&topic, &hook, &plugin).await {
            set_error(results.get().init_error(), &api_error);
        }
        Ok(())
    }

    async fn deploy_transform(
        self: Rc<Self>,
        params: admin::DeployTransformParams,
        mut results: admin::DeployTransformResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let spec = {
            let spec = params.get()?.get_spec()?;
            crate::transforms::TransformSpec {
                name: text(spec.get_name()?)?,
                plugin: text(spec.get_plugin()?)?,
                input_topic: text(spec.get_input_topic()?)?,
                output_topics: spec.get_output_topics()?.iter().map(|topic| text(topic?)).collect::<Result<_, _>>()?,
                start: spec.get_start(),
                config: config_entries(spec.get_config()?)?,
                dead_letter_topic: Some(text(spec.get_dead_letter_topic()?)?).filter(|topic| !topic.is_empty()),
            }
        };
        if let Err(api_error) = self.node.deploy_transform(spec).await {
            set_error(results.get().init_error(), &api_error);
        }
        Ok(())
    }

    async fn list_transforms(
        self: Rc<Self>,
        _: admin::ListTransformsParams,
        mut results: admin::ListTransformsResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let transforms = self.node.list_transforms().await;
        let mut list = results.get().init_transforms(transforms.len() as u32);
        for (index, transform) in transforms.iter().enumerate() {
            let mut builder = list.reborrow().get(index as u32);
            builder.set_name(&transform.name[..]);
            builder.set_plugin(&transform.plugin[..]);
            builder.set_input_topic(&transform.input_topic[..]);
            builder.set_state(&transform.state[..]);
            let mut outputs = builder.reborrow().init_output_topics(transform.output_topics.len() as u32);
            for (position, topic) in transform.output_topics.iter().enumerate() {
                outputs.set(position as u32, &topic[..]);
            }
            builder.set_dead_letter_topic(transform.dead_letter_topic.as_deref().unwrap_or(""));
            let mut partitions = builder.init_partitions(transform.partitions.len() as u32);
            for (position, progress) in transform.partitions.iter().enumerate() {
                let mut entry = partitions.reborrow().get(position as u32);
                entry.set_partition(progress.partition);
                entry.set_next_offset(progress.next_offset);
                entry.set_lag(progress.lag);
                entry.set_processed(progress.processed);
                entry.set_emitted(progress.emitted);
                entry.set_dead_lettered(progress.dead_lettered);
            }
        }
        Ok(())
    }

    async fn control_transform(
        self: Rc<Self>,
        params: admin::ControlTransformParams,
        mut results: admin::ControlTransformResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let (name, action, offset) = {
            let reader = params.get()?;
            (text(reader.get_name()?)?, text(reader.get_action()?)?, reader.get_offset())
        };
        if let Err(api_error) = self.node.control_transform(&name, &action, offset).await {
            set_error(results.get().init_error(), &api_error);
        }
        Ok(())
    }

    async fn fetch_plugin(
        self: Rc<Self>,
        params: admin::FetchPluginParams,
        mut results: admin::FetchPluginResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let digest = text(params.get()?.get_digest()?)?;
        // Registered but not fetched here yet: this broker fetches it first.
        match self.node.plugin_wasm(&digest).await {
            Ok(wasm) => {
                self.gate.connection.answered(wasm.len());
                results.get().set_wasm(&wasm)
            }
            Err(api_error) => set_error(results.get().init_error(), &api_error),
        }
        Ok(())
    }

    async fn begin_plugin_upload(
        self: Rc<Self>,
        params: admin::BeginPluginUploadParams,
        mut results: admin::BeginPluginUploadResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let announced = {
            let reader = params.get()?;
            crate::node::uploads::Announced {
                name: text(reader.get_name()?)?,
                hook: text(reader.get_hook()?)?,
                size_bytes: reader.get_size_bytes(),
                digest: text(reader.get_digest()?)?,
            }
        };
        drop(params);
        let mut answer = results.get();
        match self.node.begin_plugin_upload(announced) {
            Ok(crate::node::BeginUpload::Started(id)) => {
                answer.set_upload_id(id);
                answer.set_chunk_bytes_max(crate::node::uploads::CHUNK_BYTES_MAX);
            }
            Ok(crate::node::BeginUpload::Existing(plugin)) => {
                answer.set_chunk_bytes_max(crate::node::uploads::CHUNK_BYTES_MAX);
                set_plugin_summary(answer.init_existing(), &plugin);
            }
            Err(api_error) => set_error(answer.init_error(), &api_error),
        }
        Ok(())
    }

    async fn upload_plugin_chunk(
        self: Rc<Self>,
        params: admin::UploadPluginChunkParams,
        mut results: admin::UploadPluginChunkResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let reader = params.get()?;
        if let Err(api_error) =
            self.node.upload_plugin_chunk(reader.get_upload_id(), reader.get_offset(), reader.get_data()?)
        {
            set_error(results.get().init_error(), &api_error);
        }
        Ok(())
    }

    async fn finish_plugin_upload(
        self: Rc<Self>,
        params: admin::FinishPluginUploadParams,
        mut results: admin::FinishPluginUploadResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let id = params.get()?.get_upload_id();
        drop(params);
        // Compiling takes seconds for a big component: `upload_plugin` does it
        // off this thread.
        match self.node.finish_plugin_upload(id).await {
            Ok(plugin) => set_plugin_summary(results.get().init_plugin(), &plugin),
            Err(api_error) => set_error(results.get().init_error(), &api_error),
        }
        Ok(())
    }

    async fn report_plugin_calls(
        self: Rc<Self>,
        params: admin::ReportPluginCallsParams,
        _: admin::ReportPluginCallsResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        for report in params.get()?.get_reports()? {
            let mut log = Vec::new();
            for entry in report.get_log()? {
                log.push(crate::plugins::LogLine {
                    unix_ms: entry.get_unix_ms(),
                    level: text(entry.get_level()?)?,
                    message: text(entry.get_message()?)?,
                });
            }
            self.node.plugins().note_client_report(crate::plugins::ClientReport {
                plugin: text(report.get_plugin()?)?,
                digest: text(report.get_digest()?)?,
                source: text(report.get_source()?)?,
                calls: report.get_calls(),
                errors: report.get_errors(),
                busy_nanos: report.get_busy_nanos(),
                log,
            });
        }
        Ok(())
    }

    async fn elect_preferred_leaders(
        self: Rc<Self>,
        _: admin::ElectPreferredLeadersParams,
        mut results: admin::ElectPreferredLeadersResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        match self.node.elect_preferred_leaders().await {
            Ok(moved) => results.get().set_moved(moved),
            Err(api_error) => set_error(results.get().init_error(), &api_error),
        }
        Ok(())
    }

    async fn reassign_partitions(
        self: Rc<Self>,
        params: admin::ReassignPartitionsParams,
        mut results: admin::ReassignPartitionsResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let params = params.get()?;
        let topic = text(params.get_topic()?)?;
        let assignments = params
            .get_assignments()?
            .iter()
            .map(|entry| Ok((entry.get_partition(), entry.get_replicas()?.iter().collect())))
            .collect::<Result<Vec<_>, capnp::Error>>()?;
        if let Err(api_error) = self.node.reassign_partitions(&topic, assignments).await {
            set_error(results.get().init_error(), &api_error);
        }
        Ok(())
    }

    async fn describe_cluster(
        self: Rc<Self>,
        _: admin::DescribeClusterParams,
        mut results: admin::DescribeClusterResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let status = self.node.cluster_status();
        let mut cluster = results.get().init_cluster();
        cluster.set_cluster_id(&status.cluster_id[..]);
        cluster.set_active_controller(status.active_controller);
        cluster.set_answered_by(status.answered_by);
        cluster.set_metadata_offset(status.metadata_offset);
        cluster.set_partition_count(status.health.partition_count);
        let lists =
            [(&status.health.under_replicated, 0), (&status.health.under_min_isr, 1), (&status.health.offline, 2)];
        for (names, which) in lists {
            let mut list = match which {
                0 => cluster.reborrow().init_under_replicated(names.len() as u32),
                1 => cluster.reborrow().init_under_min_isr(names.len() as u32),
                _ => cluster.reborrow().init_offline(names.len() as u32),
            };
            for (index, name) in names.iter().enumerate() {
                list.set(index as u32, &name[..]);
            }
        }
        let mut voters = cluster.reborrow().init_voters(status.voters.len() as u32);
        for (index, voter) in status.voters.iter().enumerate() {
            voters.set(index as u32, *voter);
        }
        let mut brokers = cluster.init_brokers(status.brokers.len() as u32);
        for (index, broker) in status.brokers.iter().enumerate() {
            let mut builder = brokers.reborrow().get(index as u32);
            builder.set_id(broker.id);
            builder.set_host(&broker.host[..]);
            builder.set_port(broker.port);
            builder.set_epoch(broker.epoch as i64);
            builder.set_state(if broker.fenced { "fenced" } else { "active" });
            builder.set_rack(broker.rack.as_deref().unwrap_or(""));
            builder.set_metadata_offset(broker.metadata_offset);
        }
        Ok(())
    }

    async fn list_attachments(
        self: Rc<Self>,
        params: admin::ListAttachmentsParams,
        mut results: admin::ListAttachmentsResults,
    ) -> Result<(), capnp::Error> {
        let _permit = self.gate.enter()?;
        let topic = text(params.get()?.get_topic()?)?;
        let attachments = self.node.plugins().attachments((!topic.is_empty()).then_some(topic.as_str()));
        let mut list = results.get().init_attachments(attachments.len() as u32);
        for (index, attachment) in attachments.iter().enumerate() {
            let mut builder = list.reborrow().get(index as u32);
            builder.set_topic(&attachment.topic[..]);
            builder.set_hook(attachment.hook);
            builder.set_plugin(&attachment.plugin[..]);
            builder.set_failure_policy(attachment.policy.name());
            builder.set_status(&attachment.status[..]);
            let mut config = builder.init_config(attachment.config.len() as u32);
            for (position, (key, value)) in attachment.config.iter().enumerate() {
                let mut entry = config.reborrow().get(position as u32);
                entry.set_key(&key[..]);
                entry.set_value(&value[..]);
            }
        }
        Ok(())
    }
}

/// Serves one `controllerCall` with `controller`; returns the answer's size.
async fn answer_controller_call(
    controller: &crate::controller::Controller,
    params: broker::ControllerCallParams,
    mut results: broker::ControllerCallResults,
) -> Result<usize, capnp::Error> {
    let (kind, payload) = {
        let reader = params.get()?;
        (text(reader.get_kind()?)?, reader.get_payload()?.to_vec())
    };
    drop(params);
    let Some(kind) = crate::controller::network::RaftCallKind::parse(&kind) else {
        let error = ApiError::new(abi::ErrorCode::InvalidRequest, format!("unknown controller call {kind:?}"));
        set_error(results.get().init_error(), &error);
        return Ok(0);
    };
    match controller.handle_raft_call(kind, &payload).await {
        Ok(answer) => {
            results.get().set_payload(&answer);
            Ok(answer.len())
        }
        Err(message) => {
            set_error(results.get().init_error(), &ApiError::new(abi::ErrorCode::InvalidRequest, message));
            Ok(0)
        }
    }
}

/// The `Broker` capability on connections accepted while the broker is still
/// opening: quorum calls only (see `server.rs`).
#[derive(Debug)]
pub struct QuorumOnlyService {
    controller: crate::controller::Controller,
    /// Notified when the peer makes a call only clients make: its connection is
    /// closed then.
    client_seen: Rc<tokio::sync::Notify>,
}

impl QuorumOnlyService {
    pub fn new(controller: crate::controller::Controller, client_seen: Rc<tokio::sync::Notify>) -> QuorumOnlyService {
        QuorumOnlyService { controller, client_seen }
    }

    fn starting(&self) -> capnp::Error {
        self.client_seen.notify_one();
        capnp::Error::disconnected("the broker is still starting; connect again".to_owned())
    }
}

impl broker::Server for QuorumOnlyService {
    async fn controller_call(
        self: Rc<Self>,
        params: broker::ControllerCallParams,
        results: broker::ControllerCallResults,
    ) -> Result<(), capnp::Error> {
        answer_controller_call(&self.controller, params, results).await.map(|_| ())
    }

    async fn metadata(
        self: Rc<Self>,
        _: broker::MetadataParams,
        _: broker::MetadataResults,
    ) -> Result<(), capnp::Error> {
        Err(self.starting())
    }

    async fn admin(self: Rc<Self>, _: broker::AdminParams, _: broker::AdminResults) -> Result<(), capnp::Error> {
        Err(self.starting())
    }

    async fn produce(self: Rc<Self>, _: broker::ProduceParams, _: broker::ProduceResults) -> Result<(), capnp::Error> {
        Err(self.starting())
    }

    async fn fetch(self: Rc<Self>, _: broker::FetchParams, _: broker::FetchResults) -> Result<(), capnp::Error> {
        Err(self.starting())
    }

    async fn produce_many(
        self: Rc<Self>,
        _: broker::ProduceManyParams,
        _: broker::ProduceManyResults,
    ) -> Result<(), capnp::Error> {
        Err(self.starting())
    }

    async fn fetch_many(
        self: Rc<Self>,
        _: broker::FetchManyParams,
        _: broker::FetchManyResults,
    ) -> Result<(), capnp::Error> {
        Err(self.starting())
    }

    async fn list_offset(
        self: Rc<Self>,
        _: broker::ListOffsetParams,
        _: broker::ListOffsetResults,
    ) -> Result<(), capnp::Error> {
        Err(self.starting())
    }

    async fn init_producer_id(
        self: Rc<Self>,
        _: broker::InitProducerIdParams,
        _: broker::InitProducerIdResults,
    ) -> Result<(), capnp::Error> {
        Err(self.starting())
    }

    async fn group_heartbeat(
        self: Rc<Self>,
        _: broker::GroupHeartbeatParams,
        _: broker::GroupHeartbeatResults,
    ) -> Result<(), capnp::Error> {
        Err(self.starting())
    }

    async fn commit_offsets(
        self: Rc<Self>,
        _: broker::CommitOffsetsParams,
        _: broker::CommitOffsetsResults,
    ) -> Result<(), capnp::Error> {
        Err(self.starting())
    }

    async fn fetch_offsets(
        self: Rc<Self>,
        _: broker::FetchOffsetsParams,
        _: broker::FetchOffsetsResults,
    ) -> Result<(), capnp::Error> {
        Err(self.starting())
    }

    async fn find_coordinator(
        self: Rc<Self>,
        _: broker::FindCoordinatorParams,
        _: broker::FindCoordinatorResults,
    ) -> Result<(), capnp::Error> {
        Err(self.starting())
    }
}
