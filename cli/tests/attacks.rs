//! Hostile clients against a real `weir serve` process: each attack from the
//! hostile-client report is repeated with hand-built Cap'n Proto messages on raw
//! sockets, while a well-behaved client on its own connection keeps producing and
//! consuming. The broker's resident memory (VmRSS) is sampled throughout and must
//! stay within a named multiple of the configured limits, and the attack's
//! connections are closed by the broker when a timeout says so.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Child;
use std::time::Duration;

use abi::weir_capnp::broker;
use capnp::traits::HasTypeId;
use capnp_rpc::rpc_capnp;
use client::{CommonConfig, Consumer, ConsumerConfig, Offset, Producer, ProducerConfig, ProducerRecord};

const MIB: u64 = 1024 * 1024;
/// Answer bytes a connection may hold unsent in these tests.
const UNSENT_MAX: u64 = 16 * MIB;
/// Room the broker may use beyond its idle footprint while attacked: the unsent
/// answers of each attacking connection's limit, one fetch answer being built
/// (8 MiB) and the copies capnp makes of it, plus the allocator's slack.
const ATTACK_RSS_MAX: u64 = 4 * UNSENT_MAX + 96 * MIB;

/// What the broker may keep above its idle footprint once an attack is over.
const RETURNED_SLACK: u64 = 32 * MIB;

/// A `weir serve` child with small limits, killed when dropped.
struct Broker {
    child: Child,
    address: String,
}

impl Broker {
    fn start(data_dir: &Path, limits: &str) -> Broker {
        let config = data_dir.with_extension("toml");
        std::fs::write(&config, format!("[limits]\nunsent_response_bytes_max = {UNSENT_MAX}\n{limits}")).unwrap();
        let (child, address, lines) = support::serve(
            &["--data-dir".as_ref(), data_dir.as_os_str(), "--config".as_ref(), config.as_os_str()],
            None,
        );
        // Keep draining the log so the broker never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Broker { child, address }
    }

    /// Resident memory of the broker process, in bytes.
    fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|line| line.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A producer and a consumer on their own connections, round-tripping one
/// record at a time.
struct Healthy {
    runtime: tokio::runtime::Runtime,
    common: CommonConfig,
    producer: Producer,
    consumer: Consumer,
    sent: i64,
}

impl Healthy {
    fn connect(broker: &Broker) -> Healthy {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let common = CommonConfig { bootstrap_servers: broker.address.clone(), ..CommonConfig::default() };
        let (producer, consumer) = runtime.block_on({
            let common = common.clone();
            async move {
                let admin = client::Admin::new(common.clone()).unwrap();
                admin.create_topic(client::NewTopic::new("healthy", 1)).await.unwrap();
                let producer =
                    Producer::new(ProducerConfig { common: common.clone(), ..ProducerConfig::default() }).unwrap();
                let consumer = Consumer::new(ConsumerConfig { common, ..ConsumerConfig::default() }).unwrap();
                consumer.assign(&[("healthy".to_owned(), 0)]).await.unwrap();
                consumer.seek("healthy", 0, Offset::Beginning).unwrap();
                (producer, consumer)
            }
        });
        Healthy { runtime, common, producer, consumer, sent: 0 }
    }

    /// Produces a record and reads it back (generous deadlines: only whether it
    /// works is checked, never how fast).
    fn round_trip(&mut self) {
        let offset = self.sent;
        self.runtime.block_on(async {
            let delivered = self.producer.send(ProducerRecord::new("healthy", "ok")).await.unwrap().await.unwrap();
            assert_eq!(delivered.offset, offset);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            loop {
                let records = self.consumer.poll(Duration::from_secs(5)).await.unwrap();
                if records.iter().any(|record| record.offset == offset) {
                    break;
                }
                assert!(tokio::time::Instant::now() < deadline, "the healthy record never came back");
            }
        });
        self.sent += 1;
    }

    /// Writes `mib` MiB of 64 KiB records to `topic` (one partition).
    fn fill(&self, topic: &str, mib: usize) {
        self.runtime.block_on(async {
            client::Admin::new(self.common.clone())
                .unwrap()
                .create_topic(client::NewTopic::new(topic, 1))
                .await
                .unwrap();
            let value = vec![b'x'; 64 * 1024];
            let mut deliveries = Vec::new();
            for _ in 0..mib * 16 {
                deliveries.push(self.producer.send(ProducerRecord::new(topic, value.as_slice())).await.unwrap());
            }
            for delivery in deliveries {
                delivery.await.unwrap();
            }
        });
    }
}

/// One framed Cap'n Proto RPC message.
fn frame(build: impl FnOnce(rpc_capnp::message::Builder<'_>)) -> Vec<u8> {
    let mut message = capnp::message::Builder::new_default();
    build(message.init_root());
    capnp::serialize::write_message_to_words(&message)
}

/// `Bootstrap` as question 0: the broker capability every call below targets.
fn bootstrap() -> Vec<u8> {
    frame(|message| message.init_bootstrap().set_question_id(0))
}

/// A call of `Broker` method `method` as question `question`.
fn call(question: u32, method: u16, params: impl FnOnce(capnp::any_pointer::Builder<'_>)) -> Vec<u8> {
    frame(|message| {
        let mut call = message.init_call();
        call.set_question_id(question);
        call.set_interface_id(broker::Client::TYPE_ID);
        call.set_method_id(method);
        call.reborrow().init_target().init_promised_answer().set_question_id(0);
        params(call.init_params().init_content());
    })
}

/// `fetch` (method 3) of up to 8 MiB from offset 0 of `topic`.
fn fetch_call(question: u32, topic: &str) -> Vec<u8> {
    call(question, 3, |content| {
        let mut request = content.init_as::<broker::fetch_params::Builder<'_>>().init_request();
        request.set_topic(topic);
        request.set_offset(0);
        request.set_max_bytes(8 * MIB as u32);
    })
}

/// `fetchMany` (method 6) naming partition 0 of `topic` `entries` times.
fn fetch_many_call(question: u32, topic: &str, entries: u32) -> Vec<u8> {
    call(question, 6, |content| {
        let mut request = content.init_as::<broker::fetch_many_params::Builder<'_>>().init_request();
        request.set_max_bytes(8 * MIB as u32);
        let mut partitions = request.init_partitions(entries);
        for index in 0..entries {
            let mut entry = partitions.reborrow().get(index);
            entry.set_topic(topic);
            entry.set_max_bytes(8 * MIB as u32);
        }
    })
}

fn connect(address: &str) -> TcpStream {
    TcpStream::connect(address).unwrap()
}

/// Connects from another loopback address (127.0.0.2), as a second host would.
fn connect_from_second_host(address: &str) -> TcpStream {
    let socket = libc_socket_bound_to([127, 0, 0, 2]);
    let target: SocketAddr = address.parse().unwrap();
    socket.connect(&target.into()).unwrap();
    socket.into()
}

fn libc_socket_bound_to(ip: [u8; 4]) -> socket2::Socket {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::from((ip, 0)).into()).unwrap();
    socket
}

/// Waits (up to two minutes) until the broker closes `stream`.
fn closed_by_broker(mut stream: TcpStream) -> bool {
    stream.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut buffer = [0u8; 65536];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// Runs `rounds` healthy round trips, sampling the broker's RSS around each;
/// returns the peak.
fn peak_rss_during(broker: &Broker, healthy: &mut Healthy, rounds: usize) -> u64 {
    let mut peak = broker.rss();
    for _ in 0..rounds {
        healthy.round_trip();
        peak = peak.max(broker.rss());
    }
    peak
}

/// A broker with default limits and 8 MiB in topic `big`, a healthy client, and
/// the broker's RSS before any attack.
fn with_8_mib_topic() -> (tempfile::TempDir, Broker, Healthy, u64) {
    let temp = tempfile::tempdir().unwrap();
    let broker = Broker::start(temp.path(), "");
    let mut healthy = Healthy::connect(&broker);
    healthy.fill("big", 8);
    healthy.round_trip();
    let baseline = broker.rss();
    (temp, broker, healthy, baseline)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB as f64)
}

fn assert_within(rss: u64, baseline: u64, allowed: u64) {
    assert!(rss <= baseline + allowed, "RSS {} over baseline {} + {}", mib(rss), mib(baseline), mib(allowed));
}

#[test]
fn pipelined_fetches_whose_answers_are_never_read_stay_within_the_unsent_limit() {
    let (_temp, broker, mut healthy, baseline) = with_8_mib_topic();

    // 2,000 fetches of 8 MiB each (16 GB of answers), never read. (Calls past
    // in_flight_calls_max are refused; those in flight wait for answer room.)
    let mut attacker = connect(&broker.address);
    let mut calls = bootstrap();
    for question in 1..=2_000 {
        calls.extend(fetch_call(question, "big"));
    }
    let writer = std::thread::spawn(move || {
        let _ = attacker.write_all(&calls); // blocks once the broker stops reading
        attacker
    });
    let peak = peak_rss_during(&broker, &mut healthy, 40);
    eprintln!("unread answers: baseline {}, peak {}", mib(baseline), mib(peak));
    assert_within(peak, baseline, ATTACK_RSS_MAX);
    drop(broker);
    let _ = writer.join();
}

#[test]
fn a_fetch_many_naming_one_partition_400k_times_costs_one_answer() {
    let (_temp, broker, mut healthy, baseline) = with_8_mib_topic();

    let mut attacker = connect(&broker.address);
    let mut request = bootstrap();
    request.extend(fetch_many_call(1, "big", 400_000));
    eprintln!("fetchMany request: {}", mib(request.len() as u64));
    attacker.write_all(&request).unwrap();
    // The answer arrives (the attacker reads it this time): the work is done.
    attacker.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
    let mut answer = vec![0u8; 64 * 1024];
    let mut received = 0usize;
    let mut peak = broker.rss();
    while received < 8 * MIB as usize {
        let n = attacker.read(&mut answer).unwrap();
        assert!(n > 0, "the broker closed the connection");
        received += n;
        peak = peak.max(broker.rss());
    }
    peak = peak.max(peak_rss_during(&broker, &mut healthy, 5));
    eprintln!("fetchMany x400k: baseline {}, peak {}", mib(baseline), mib(peak));
    assert_within(peak, baseline, ATTACK_RSS_MAX);
    // Once the attacker is gone, the memory goes back.
    drop(attacker);
    // (The broker gives memory back once a second; wait for it, generously.)
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut after = broker.rss();
    while after > baseline + RETURNED_SLACK && std::time::Instant::now() < deadline {
        healthy.round_trip();
        after = broker.rss();
    }
    eprintln!("fetchMany x400k: after the attack {}", mib(after));
    assert_within(after, baseline, RETURNED_SLACK);
}

#[test]
fn frame_headers_without_bodies_commit_nothing_and_time_out() {
    let temp = tempfile::tempdir().unwrap();
    let broker = Broker::start(temp.path(), "request_timeout_ms = 3000\n");
    let mut healthy = Healthy::connect(&broker);
    healthy.round_trip();
    let baseline = broker.rss();

    // 200 connections, each declaring a message just under request_bytes_max and
    // sending only its 8-byte header (1.6 KB in all).
    let declared_words: u32 = (16 * MIB as u32) / 8;
    let mut header = 0u32.to_le_bytes().to_vec();
    header.extend(declared_words.to_le_bytes());
    let attackers: Vec<TcpStream> = (0..200)
        .map(|_| {
            let mut stream = connect(&broker.address);
            stream.write_all(&header).unwrap();
            stream
        })
        .collect();
    let peak = peak_rss_during(&broker, &mut healthy, 20);
    eprintln!("200 bare headers: baseline {}, peak {}", mib(baseline), mib(peak));
    assert_within(peak, baseline, 64 * MIB);
    // The requests never complete: request_timeout_ms closes every connection.
    for stream in attackers {
        assert!(closed_by_broker(stream), "a partial request outlived request_timeout_ms");
    }
    healthy.round_trip();
}

#[test]
fn idle_connections_are_closed_and_one_host_cannot_take_every_slot() {
    let temp = tempfile::tempdir().unwrap();
    let broker = Broker::start(temp.path(), "idle_timeout_ms = 2000\nconnections_per_ip_max = 8\n");
    let mut healthy = Healthy::connect(&broker);

    // A second host takes its 8 slots; the 9th is closed at once.
    let mut held: Vec<TcpStream> = (0..8).map(|_| connect_from_second_host(&broker.address)).collect();
    for stream in &mut held {
        stream.write_all(&bootstrap()).unwrap();
    }
    let refused = connect_from_second_host(&broker.address);
    assert!(closed_by_broker(refused), "a 9th connection from one host was kept");
    // The first host is not locked out.
    healthy.round_trip();
    // Nothing in flight and nothing moving: each held connection is closed.
    for stream in held {
        assert!(closed_by_broker(stream), "an idle connection outlived idle_timeout_ms");
    }
    healthy.round_trip();
}
