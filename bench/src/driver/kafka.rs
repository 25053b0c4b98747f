//! Apache Kafka through `rdkafka` (librdkafka, built from the crate's bundled
//! sources): the Rust client most Kafka users pick.
//!
//! Settings mirror the Weir driver's: `acks=1` and no idempotence for page-cache
//! runs, `acks=all` with idempotence for fsync runs (on one broker, all = the
//! leader) and for every run of the replicated workload (a three-node cluster,
//! topics with a replication factor and `min.insync.replicas`); `linger.ms` and `batch.size` from the workload; no compression; at
//! most 5 requests in flight per connection (the Java client's default).
//! Fsync topics get `flush.messages=1`: the broker fsyncs the log after every
//! append, before it answers.

use std::time::Duration;

use anyhow::Context;
use futures::future::BoxFuture;
use futures::FutureExt;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::{Ack, Driver, Durability, ProducerSpec, Publisher, Start, Subscriber, TopicSpec};

pub struct KafkaDriver {
    bootstrap_servers: String,
    admin: AdminClient<DefaultClientContext>,
}

impl KafkaDriver {
    pub fn new(bootstrap_servers: &str) -> anyhow::Result<KafkaDriver> {
        let admin = base_config(bootstrap_servers).create().context("Kafka admin client")?;
        Ok(KafkaDriver { bootstrap_servers: bootstrap_servers.to_owned(), admin })
    }
}

fn base_config(bootstrap_servers: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap_servers).set("log_level", "3");
    config
}

fn admin_options() -> AdminOptions {
    AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))).request_timeout(Some(Duration::from_secs(30)))
}

impl Driver for KafkaDriver {
    fn create_topic<'a>(&'a self, topic: &'a TopicSpec) -> BoxFuture<'a, anyhow::Result<()>> {
        async move {
            let replication = TopicReplication::Fixed(topic.replication_factor.into());
            let mut new_topic = NewTopic::new(&topic.name, topic.partitions, replication);
            if topic.durability == Durability::Fsync {
                new_topic = new_topic.set("flush.messages", "1");
            }
            let min_insync = topic.min_insync_replicas.map(|replicas| replicas.to_string());
            if let Some(min_insync) = &min_insync {
                new_topic = new_topic.set("min.insync.replicas", min_insync);
            }
            let results = self.admin.create_topics([&new_topic], &admin_options()).await?;
            for result in results {
                result.map_err(|(name, code)| anyhow::anyhow!("create Kafka topic {name}: {code}"))?;
            }
            wait_for_leaders(&self.bootstrap_servers, topic).await
        }
        .boxed()
    }

    fn delete_topic<'a>(&'a self, name: &'a str) -> BoxFuture<'a, anyhow::Result<()>> {
        async move {
            for result in self.admin.delete_topics(&[name], &admin_options()).await? {
                result.map_err(|(name, code)| anyhow::anyhow!("delete Kafka topic {name}: {code}"))?;
            }
            Ok(())
        }
        .boxed()
    }

    fn publisher<'a>(
        &'a self,
        topic: &'a TopicSpec,
        spec: ProducerSpec,
    ) -> BoxFuture<'a, anyhow::Result<Box<dyn Publisher>>> {
        async move {
            let producer: FutureProducer = base_config(&self.bootstrap_servers)
                .set("acks", if spec.acks_all { "all" } else { "1" })
                .set("enable.idempotence", if spec.acks_all { "true" } else { "false" })
                .set("linger.ms", spec.linger.as_millis().to_string())
                .set("batch.size", spec.batch_bytes_max.to_string())
                .set("compression.type", "none")
                // The Java client's default (librdkafka's is 1,000,000 without
                // idempotence): at most 5 produce requests in flight per broker.
                .set("max.in.flight.requests.per.connection", "5")
                .create()
                .context("Kafka producer")?;
            Ok(Box::new(KafkaPublisher { producer, topic: topic.name.clone() }) as Box<dyn Publisher>)
        }
        .boxed()
    }

    fn subscriber<'a>(
        &'a self,
        topic: &'a TopicSpec,
        start: Start,
    ) -> BoxFuture<'a, anyhow::Result<Box<dyn Subscriber>>> {
        async move {
            let consumer: StreamConsumer = base_config(&self.bootstrap_servers)
                .set("group.id", format!("weir-bench-{}", topic.name))
                .set("enable.auto.commit", "false")
                .set("enable.partition.eof", "false")
                .set("fetch.wait.max.ms", "100")
                .create()
                .context("Kafka consumer")?;
            let offset = match start {
                Start::Beginning => Offset::Beginning,
                Start::End => Offset::End,
            };
            let mut assignment = TopicPartitionList::new();
            for partition in 0..topic.partitions {
                assignment.add_partition_offset(&topic.name, partition, offset)?;
            }
            consumer.assign(&assignment)?;
            Ok(Box::new(KafkaSubscriber { consumer }) as Box<dyn Subscriber>)
        }
        .boxed()
    }
}

/// A new topic's partitions get their leaders a moment after CreateTopics answers;
/// a producer started earlier would only retry. Waits until metadata shows all,
/// each with its replicas in sync.
async fn wait_for_leaders(bootstrap_servers: &str, topic: &TopicSpec) -> anyhow::Result<()> {
    let probe: FutureProducer = base_config(bootstrap_servers).create()?;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let name = topic.name.clone();
    let wanted = topic.partitions as usize;
    let replicas = topic.replication_factor as usize;
    loop {
        let probe = probe.clone();
        let name = name.clone();
        let ready = tokio::task::spawn_blocking(move || {
            let metadata = probe.client().fetch_metadata(Some(&name), Duration::from_secs(5)).ok()?;
            let topic = metadata.topics().first()?;
            let in_sync = |p: &rdkafka::metadata::MetadataPartition| {
                p.leader() >= 0 && p.replicas().len() == replicas && p.isr().len() == p.replicas().len()
            };
            Some(topic.partitions().len() == wanted && topic.partitions().iter().all(in_sync))
        })
        .await?;
        if ready == Some(true) {
            return Ok(());
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "Kafka topic {} has no leader or a short ISR after 30 s",
            topic.name
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct KafkaPublisher {
    producer: FutureProducer,
    topic: String,
}

impl Publisher for KafkaPublisher {
    fn send<'a>(&'a self, partition: i32, payload: &'a [u8]) -> BoxFuture<'a, anyhow::Result<Ack>> {
        async move {
            let mut record = FutureRecord::<(), [u8]>::to(&self.topic).partition(partition).payload(payload);
            loop {
                match self.producer.send_result(record) {
                    Ok(delivery) => {
                        return Ok(async move {
                            match delivery.await {
                                Ok(Ok(_)) => Ok(()),
                                Ok(Err((error, _))) => Err(anyhow::Error::from(error).context("Kafka delivery")),
                                Err(_) => Err(anyhow::anyhow!("Kafka producer dropped a delivery")),
                            }
                        }
                        .boxed());
                    }
                    // librdkafka's queue is full: the same back-pressure as a full
                    // Weir producer buffer.
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                        record = returned;
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    Err((error, _)) => return Err(anyhow::Error::from(error).context("Kafka send")),
                }
            }
        }
        .boxed()
    }

    fn flush(&self) -> BoxFuture<'_, anyhow::Result<()>> {
        let producer = self.producer.clone();
        async move {
            tokio::task::spawn_blocking(move || producer.flush(Duration::from_secs(60))).await??;
            Ok(())
        }
        .boxed()
    }
}

struct KafkaSubscriber {
    consumer: StreamConsumer,
}

/// Records handed over per poll at most, once the first has arrived.
const POLL_RECORDS_MAX: usize = 4096;

impl Subscriber for KafkaSubscriber {
    fn poll<'a>(
        &'a mut self,
        timeout: Duration,
        sink: &'a mut (dyn FnMut(&[u8]) + Send),
    ) -> BoxFuture<'a, anyhow::Result<usize>> {
        async move {
            let first = match tokio::time::timeout(timeout, self.consumer.recv()).await {
                Err(_elapsed) => return Ok(0),
                Ok(message) => message?,
            };
            sink(first.payload().unwrap_or_default());
            drop(first);
            let mut count = 1;
            while count < POLL_RECORDS_MAX {
                match self.consumer.recv().now_or_never() {
                    Some(message) => {
                        sink(message?.payload().unwrap_or_default());
                        count += 1;
                    }
                    None => break,
                }
            }
            Ok(count)
        }
        .boxed()
    }
}
