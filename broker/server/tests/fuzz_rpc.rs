//! Fuzzing the RPC edge: request messages → `BrokerService`/`AdminService` → `Node`.
//!
//! Valid parameters of every `Broker` and `Admin` method (a topic exists, with
//! records) are serialized, mutated as bytes (bit flips, overwrites, extreme
//! values), read back under the broker's own reader limits and sent as the call's
//! parameters through a capnp client of a real `Node` on a temporary directory.
//! (Mutations that break capnp's pointer structure are refused by capnp before any
//! handler runs, as on a connection.)
//!
//! Properties: no panic, every call answers (an answer or an error; the broker's
//! wait limits are small here so a mutated wait cannot stall the run), and the
//! broker still serves a well-formed produce and fetch afterwards.
//!
//! Runs `WEIR_FUZZ_EXECS` executions (default 10,000; 10000000 for a long run) from
//! `WEIR_FUZZ_SEED` (default 0); a failure prints its seed, and
//! `WEIR_FUZZ_SEED=s WEIR_FUZZ_EXECS=1` replays it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use abi::batch::BatchBuilder;
use abi::weir_capnp::{admin, broker as wire, Acks};
use broker::config::BrokerConfig;
use broker::node::Node;
use broker::rpc::{BrokerService, CallGate};
use broker::transport::ConnectionState;
use capnp::any_pointer;
use capnp::traits::HasTypeId;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().map_or(default, |value| value.parse().expect("a number"))
}

/// A serialized params struct of one method, ready to be mutated.
struct Seed {
    admin: bool,
    method: u16,
    words: Vec<u8>,
}

fn seed<T: capnp::traits::Owned>(admin: bool, method: u16, build: impl FnOnce(T::Builder<'_>)) -> Seed
where
    for<'a> T::Builder<'a>: capnp::traits::FromPointerBuilder<'a>,
{
    let mut message = capnp::message::Builder::new_default();
    build(message.init_root::<T::Builder<'_>>());
    Seed { admin, method, words: capnp::serialize::write_message_to_words(&message) }
}

fn batch(values: &[&[u8]]) -> Vec<u8> {
    let mut builder = BatchBuilder::new(1_700_000_000_000);
    for value in values {
        builder.push(1_700_000_000_000, Some(b"key"), Some(value), &[("h", Some(b"v"))]);
    }
    builder.encode()
}

fn seeds() -> Vec<Seed> {
    vec![
        seed::<wire::metadata_params::Owned>(false, 0, |mut params| {
            let mut topics = params.reborrow().init_topics(2);
            topics.set(0, "fuzz");
            topics.set(1, "missing");
        }),
        seed::<wire::produce_params::Owned>(false, 2, |params| {
            let mut request = params.init_request();
            request.set_topic("fuzz");
            request.set_partition(0);
            request.set_acks(Acks::All);
            request.set_timeout_ms(50);
            request.set_batches(&batch(&[b"one", b"two"]));
        }),
        seed::<wire::fetch_params::Owned>(false, 3, |params| {
            let mut request = params.init_request();
            request.set_topic("fuzz");
            request.set_max_bytes(1 << 20);
            request.set_max_wait_ms(5);
        }),
        seed::<wire::list_offset_params::Owned>(false, 4, |mut params| {
            params.set_topic("fuzz");
            params.init_query().set_timestamp_ms(1_700_000_000_000);
        }),
        seed::<wire::init_producer_id_params::Owned>(false, 5, |_| {}),
        seed::<wire::fetch_many_params::Owned>(false, 6, |params| {
            let mut request = params.init_request();
            request.set_max_bytes(1 << 20);
            request.set_max_wait_ms(5);
            let mut partitions = request.init_partitions(2);
            for index in 0..2 {
                let mut entry = partitions.reborrow().get(index);
                entry.set_topic("fuzz");
                entry.set_partition(index as i32);
                entry.set_max_bytes(1 << 16);
            }
        }),
        seed::<wire::produce_many_params::Owned>(false, 12, |params| {
            let mut request = params.init_request();
            request.set_acks(Acks::Leader);
            request.set_timeout_ms(50);
            let mut partitions = request.init_partitions(2);
            for index in 0..2 {
                let mut entry = partitions.reborrow().get(index);
                entry.set_topic("fuzz");
                entry.set_partition(index as i32);
                entry.set_batches(&batch(&[b"three"]));
            }
        }),
        seed::<wire::group_heartbeat_params::Owned>(false, 7, |params| {
            let mut request = params.init_request();
            request.set_group_id("group");
            request.set_subscription_changed(true);
            request.init_subscribed_topics(1).set(0, "fuzz");
        }),
        seed::<wire::commit_offsets_params::Owned>(false, 8, |mut params| {
            params.set_group_id("group");
            params.set_member_id("member");
            let mut entry = params.init_offsets(1).get(0);
            entry.set_topic("fuzz");
            entry.set_offset(1);
        }),
        seed::<wire::fetch_offsets_params::Owned>(false, 9, |mut params| {
            params.set_group_id("group");
            params.init_partitions(1).get(0).set_topic("fuzz");
        }),
        seed::<admin::create_topic_params::Owned>(true, 0, |params| {
            let mut spec = params.init_spec();
            spec.set_name("created");
            spec.set_partition_count(2);
            spec.set_replication_factor(1);
            let mut config = spec.init_configs(1).get(0);
            config.set_key("retention.ms");
            config.set_value("1000");
        }),
        seed::<admin::delete_topic_params::Owned>(true, 1, |mut params| params.set_name("created")),
        seed::<admin::describe_topic_params::Owned>(true, 3, |mut params| params.set_name("fuzz")),
        seed::<admin::alter_topic_config_params::Owned>(true, 4, |mut params| {
            params.set_name("fuzz");
            let mut config = params.init_configs(1).get(0);
            config.set_key("retention.bytes");
            config.set_value("100000");
        }),
        seed::<admin::describe_group_params::Owned>(true, 6, |mut params| params.set_group_id("group")),
        seed::<admin::reset_offsets_params::Owned>(true, 8, |mut params| {
            params.set_group_id("group");
            params.init_offsets(1).get(0).set_topic("fuzz");
        }),
        seed::<admin::upload_plugin_params::Owned>(true, 9, |mut params| {
            params.set_name("plugin");
            params.set_wasm(b"\0asm\x0d\0\x01\0");
        }),
        seed::<admin::attach_plugin_params::Owned>(true, 13, |mut params| {
            params.set_topic("fuzz");
            params.set_hook("produce-interceptor");
            params.set_plugin("plugin");
        }),
    ]
}

/// Mutates the message body (never the 8-byte segment table).
fn mutate(rng: &mut StdRng, words: &mut [u8]) {
    let body = 8..words.len();
    if body.is_empty() {
        return;
    }
    for _ in 0..rng.gen_range(1..=4) {
        let at = rng.gen_range(body.clone());
        match rng.gen_range(0..4) {
            0 => words[at] ^= 1 << rng.gen_range(0..8),
            1 => words[at] = rng.gen(),
            2 => words[at] = [0x00, 0x7f, 0x80, 0xff][rng.gen_range(0..4)],
            _ => {
                // An aligned 32-bit field set to an extreme.
                let at = (at & !3).max(8).min(words.len() - 4);
                let value: u32 = [0, 1, u32::MAX, i32::MAX as u32, i32::MIN as u32][rng.gen_range(0..5)];
                words[at..at + 4].copy_from_slice(&value.to_le_bytes());
            }
        }
    }
}

async fn call(client: &capnp::capability::Client, interface_id: u64, method: u16, params: any_pointer::Reader<'_>) {
    let mut request = client.new_call::<any_pointer::Owned, any_pointer::Owned>(interface_id, method, None);
    if request.get().set_as(params).is_err() {
        return; // capnp refuses the structure before any handler sees it
    }
    // An error answer is fine; only a panic or a hang is not.
    let _ = request.send().promise.await;
}

#[test]
fn every_method_survives_mutated_requests_and_the_broker_keeps_serving() {
    let first_seed = env_number("WEIR_FUZZ_SEED", 0);
    let execs = env_number("WEIR_FUZZ_EXECS", 10_000);
    let temp = tempfile::tempdir().unwrap();
    let mut config = BrokerConfig { data_dir: temp.path().to_path_buf(), ..BrokerConfig::default() };
    config.limits.fetch_wait_ms_max = 10;
    config.limits.produce_timeout_ms_max = 100;
    config.plugins.call_deadline_ms = 100;
    let limits = config.limits.clone();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let node = Arc::new(runtime.block_on(Node::open(&config)).unwrap());
    let local = tokio::task::LocalSet::new();
    let served = node.clone();
    local.block_on(&runtime, async move {
        let connection = ConnectionState::new(limits.connection());
        let service = BrokerService::new(served, CallGate::new(limits.in_flight_calls_max, connection));
        let broker: wire::Client = capnp_rpc::new_client(service);
        let admin = broker.admin_request().send().pipeline.get_admin();
        let mut create = admin.create_topic_request();
        let mut spec = create.get().init_spec();
        spec.set_name("fuzz");
        spec.set_partition_count(2);
        spec.set_replication_factor(1);
        let created = create.send().promise.await.unwrap();
        let created = created.get().unwrap();
        assert!(!created.has_error(), "{:?}", created.get_error().unwrap().get_message().unwrap().to_str());
        let seeds = seeds();
        let mut options = capnp::message::ReaderOptions::new();
        options.traversal_limit_in_words(Some(limits.traversal_limit_words())).nesting_limit(limits.nesting_limit);
        for exec in first_seed..first_seed + execs {
            let mut rng = StdRng::seed_from_u64(exec);
            let seed = &seeds[rng.gen_range(0..seeds.len())];
            let mut words = seed.words.clone();
            if rng.gen_range(0..8) > 0 {
                mutate(&mut rng, &mut words);
            }
            let Ok(message) = capnp::serialize::read_message_from_flat_slice(&mut &words[..], options) else {
                continue;
            };
            let Ok(params) = message.get_root::<any_pointer::Reader<'_>>() else { continue };
            let (client, interface_id) = match seed.admin {
                true => (&admin.client, admin::Client::TYPE_ID),
                false => (&broker.client, wire::Client::TYPE_ID),
            };
            let answered = tokio::time::timeout(
                std::time::Duration::from_secs(60),
                call(client, interface_id, seed.method, params),
            );
            assert!(answered.await.is_ok(), "seed {exec}: method {} never answered", seed.method);
        }
        // Still serving: a well-formed produce and fetch of the seeded topic.
        let mut produce = broker.produce_request();
        let mut request = produce.get().init_request();
        request.set_topic("fuzz");
        request.set_partition(1);
        request.set_acks(Acks::All);
        request.set_timeout_ms(100);
        request.set_batches(&batch(&[b"after"]));
        let produced = produce.send().promise.await.unwrap();
        let response = produced.get().unwrap().get_response().unwrap();
        if response.has_error() {
            let error = response.get_error().unwrap();
            panic!(
                "produce after the fuzz run failed: {}: {:?}",
                error.get_code(),
                error.get_message().unwrap().to_str()
            );
        }
        eprintln!("{execs} executions from seed {first_seed}: the broker still serves");
    });
    node.shutdown();
}
