//! Weir through its own client core (`client` crate): what every Weir SDK runs.

use std::time::Duration;

use anyhow::Context;
use futures::future::BoxFuture;
use futures::FutureExt;

use super::{Ack, Driver, Durability, ProducerSpec, Publisher, Start, Subscriber, TopicSpec};

pub struct WeirDriver {
    bootstrap_servers: String,
    admin: client::Admin,
}

impl WeirDriver {
    pub fn new(bootstrap_servers: &str) -> anyhow::Result<WeirDriver> {
        let common = common(bootstrap_servers);
        Ok(WeirDriver { bootstrap_servers: bootstrap_servers.to_owned(), admin: client::Admin::new(common)? })
    }

    /// The admin client, for the plugin workloads.
    pub fn admin(&self) -> &client::Admin {
        &self.admin
    }

    /// As the Kafka driver: a replicated topic is ready once every partition has
    /// a leader and every replica in its ISR.
    async fn wait_for_replicas(&self, topic: &TopicSpec) -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let ready = match self.admin.describe_topic(&topic.name).await {
                Ok(description) => {
                    description.partitions.len() == topic.partitions as usize
                        && description.partitions.iter().all(|partition| {
                            partition.leader >= 0
                                && partition.replicas.len() == topic.replication_factor as usize
                                && partition.isr.len() == partition.replicas.len()
                        })
                }
                Err(_) => false,
            };
            if ready {
                return Ok(());
            }
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "Weir topic {} has no leader or a short ISR after 30 s",
                topic.name
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn common(bootstrap_servers: &str) -> client::CommonConfig {
    client::CommonConfig { bootstrap_servers: bootstrap_servers.to_owned(), ..client::CommonConfig::default() }
}

impl Driver for WeirDriver {
    fn create_topic<'a>(&'a self, topic: &'a TopicSpec) -> BoxFuture<'a, anyhow::Result<()>> {
        async move {
            let flush_policy = match topic.durability {
                Durability::PageCache => "interval",
                Durability::Fsync => "always",
            };
            let mut new_topic =
                client::NewTopic::new(topic.name.clone(), topic.partitions).config("flush.policy", flush_policy);
            new_topic.replication_factor = topic.replication_factor;
            if let Some(min_insync) = topic.min_insync_replicas {
                new_topic = new_topic.config("min.insync.replicas", min_insync.to_string());
            }
            self.admin.create_topic(new_topic).await.with_context(|| format!("create Weir topic {}", topic.name))?;
            if topic.replication_factor > 1 {
                self.wait_for_replicas(topic).await?;
            }
            Ok(())
        }
        .boxed()
    }

    fn delete_topic<'a>(&'a self, name: &'a str) -> BoxFuture<'a, anyhow::Result<()>> {
        async move { self.admin.delete_topic(name).await.with_context(|| format!("delete Weir topic {name}")) }.boxed()
    }

    fn publisher<'a>(
        &'a self,
        topic: &'a TopicSpec,
        spec: ProducerSpec,
    ) -> BoxFuture<'a, anyhow::Result<Box<dyn Publisher>>> {
        async move {
            let config = client::ProducerConfig {
                common: common(&self.bootstrap_servers),
                acks: if spec.acks_all { client::Acks::All } else { client::Acks::Leader },
                linger: spec.linger,
                batch_bytes_max: spec.batch_bytes_max,
                // As Kafka's producer: idempotence needs acks=all.
                idempotence: spec.acks_all,
                ..client::ProducerConfig::default()
            };
            let producer = client::Producer::new(config)?;
            Ok(Box::new(WeirPublisher { producer, topic: topic.name.clone() }) as Box<dyn Publisher>)
        }
        .boxed()
    }

    fn subscriber<'a>(
        &'a self,
        topic: &'a TopicSpec,
        start: Start,
    ) -> BoxFuture<'a, anyhow::Result<Box<dyn Subscriber>>> {
        async move {
            let config = client::ConsumerConfig {
                common: common(&self.bootstrap_servers),
                fetch_max_wait: Duration::from_millis(100),
                auto_commit: false,
                ..client::ConsumerConfig::default()
            };
            let consumer = client::Consumer::new(config)?;
            let partitions: Vec<(String, i32)> = (0..topic.partitions).map(|p| (topic.name.clone(), p)).collect();
            consumer.assign(&partitions).await?;
            consumer.seek_all(match start {
                Start::Beginning => client::Offset::Beginning,
                Start::End => client::Offset::End,
            })?;
            Ok(Box::new(WeirSubscriber { consumer }) as Box<dyn Subscriber>)
        }
        .boxed()
    }
}

struct WeirPublisher {
    producer: client::Producer,
    topic: String,
}

impl Publisher for WeirPublisher {
    fn send<'a>(&'a self, partition: i32, payload: &'a [u8]) -> BoxFuture<'a, anyhow::Result<Ack>> {
        async move {
            // The borrowed path: no owned copy of the value before it is
            // written into the batch.
            let record = client::RecordRef {
                topic: &self.topic,
                partition: Some(partition),
                key: None,
                value: Some(payload),
                headers: &[],
                timestamp_ms: None,
            };
            let delivery = self.producer.send_ref(record).await?;
            Ok(delivery.map(|outcome| outcome.map(drop).map_err(anyhow::Error::from)).boxed())
        }
        .boxed()
    }

    fn flush(&self) -> BoxFuture<'_, anyhow::Result<()>> {
        async move {
            self.producer.flush().await;
            Ok(())
        }
        .boxed()
    }
}

struct WeirSubscriber {
    consumer: client::Consumer,
}

impl Subscriber for WeirSubscriber {
    fn poll<'a>(
        &'a mut self,
        timeout: Duration,
        sink: &'a mut (dyn FnMut(&[u8]) + Send),
    ) -> BoxFuture<'a, anyhow::Result<usize>> {
        async move {
            let records = self.consumer.poll(timeout).await?;
            for record in &records {
                sink(record.value.as_deref().unwrap_or_default());
            }
            Ok(records.len())
        }
        .boxed()
    }
}
