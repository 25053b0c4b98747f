//! NATS JetStream through `async-nats`, the official Rust client.
//!
//! A topic is one file-backed stream with subjects `<topic>.<partition>`, one
//! replica. A publish is acknowledged by the server's PubAck, which it sends once
//! the message is in the stream's file (page cache), or fsync'ed when the server
//! runs with `sync_interval: always`. Reads use an ordered pull consumer (no
//! acknowledgements, the fastest way to read a stream in order).

use std::time::Duration;

use anyhow::Context;
use async_nats::jetstream::{self, consumer, stream};
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};

use super::{Ack, Driver, ProducerSpec, Publisher, Start, Subscriber, TopicSpec};

pub struct NatsDriver {
    url: String,
    context: jetstream::Context,
}

impl NatsDriver {
    pub async fn connect(url: &str) -> anyhow::Result<NatsDriver> {
        let client = async_nats::connect(url).await.with_context(|| format!("connect to NATS at {url}"))?;
        Ok(NatsDriver { url: url.to_owned(), context: context(client) })
    }
}

/// PubAcks a context lets be awaited at once. The harness bounds what is in
/// flight itself (`--inflight-bytes`), as it does for every system; the
/// client's own bound (5,000 by default) must not be lower: a publish past it
/// waits for an earlier PubAck to be awaited, which the harness does only once
/// its bound is reached, so 41,943 records of 100 B in flight never drained.
const ACKS_IN_FLIGHT_MAX: usize = 1 << 22;

/// A JetStream context that waits up to a minute for PubAcks (the default, 5 s, is
/// shorter than the queue of a `sync_interval: always` server at full load).
fn context(client: async_nats::Client) -> jetstream::Context {
    jetstream::ContextBuilder::new().timeout(Duration::from_secs(60)).max_ack_inflight(ACKS_IN_FLIGHT_MAX).build(client)
}

impl Driver for NatsDriver {
    fn create_topic<'a>(&'a self, topic: &'a TopicSpec) -> BoxFuture<'a, anyhow::Result<()>> {
        async move {
            // The harness runs single NATS servers only (no JetStream cluster).
            anyhow::ensure!(
                topic.replication_factor == 1,
                "NATS stream {}: the harness runs no NATS cluster for {} replicas",
                topic.name,
                topic.replication_factor
            );
            let config = stream::Config {
                name: topic.name.clone(),
                subjects: vec![format!("{}.*", topic.name)],
                storage: stream::StorageType::File,
                num_replicas: 1,
                ..Default::default()
            };
            self.context
                .create_stream(config)
                .await
                .map_err(|error| anyhow::anyhow!("create NATS stream {}: {error}", topic.name))?;
            Ok(())
        }
        .boxed()
    }

    fn delete_topic<'a>(&'a self, name: &'a str) -> BoxFuture<'a, anyhow::Result<()>> {
        async move {
            self.context
                .delete_stream(name)
                .await
                .map_err(|error| anyhow::anyhow!("delete NATS stream {name}: {error}"))?;
            Ok(())
        }
        .boxed()
    }

    fn publisher<'a>(
        &'a self,
        topic: &'a TopicSpec,
        _spec: ProducerSpec,
    ) -> BoxFuture<'a, anyhow::Result<Box<dyn Publisher>>> {
        async move {
            // Its own connection, like every other system's producer; JetStream has
            // no client-side batching to configure (the connection coalesces writes).
            let client = async_nats::connect(&self.url).await.context("NATS producer connection")?;
            let subjects =
                (0..topic.partitions).map(|p| async_nats::Subject::from(format!("{}.{p}", topic.name))).collect();
            Ok(Box::new(NatsPublisher { client: client.clone(), context: context(client), subjects })
                as Box<dyn Publisher>)
        }
        .boxed()
    }

    fn subscriber<'a>(
        &'a self,
        topic: &'a TopicSpec,
        start: Start,
    ) -> BoxFuture<'a, anyhow::Result<Box<dyn Subscriber>>> {
        async move {
            let client = async_nats::connect(&self.url).await.context("NATS consumer connection")?;
            let context = context(client);
            let stream = context
                .get_stream(&topic.name)
                .await
                .map_err(|error| anyhow::anyhow!("NATS stream {}: {error}", topic.name))?;
            let config = consumer::pull::OrderedConfig {
                deliver_policy: match start {
                    Start::Beginning => consumer::DeliverPolicy::All,
                    Start::End => consumer::DeliverPolicy::New,
                },
                ..Default::default()
            };
            let consumer = stream
                .create_consumer(config)
                .await
                .map_err(|error| anyhow::anyhow!("NATS ordered consumer on {}: {error}", topic.name))?;
            let messages = consumer.messages().await.map_err(|error| anyhow::anyhow!("NATS messages: {error}"))?;
            Ok(Box::new(NatsSubscriber { messages }) as Box<dyn Subscriber>)
        }
        .boxed()
    }
}

struct NatsPublisher {
    client: async_nats::Client,
    context: jetstream::Context,
    subjects: Vec<async_nats::Subject>,
}

impl Publisher for NatsPublisher {
    fn send<'a>(&'a self, partition: i32, payload: &'a [u8]) -> BoxFuture<'a, anyhow::Result<Ack>> {
        async move {
            let subject = self.subjects[partition as usize].clone();
            let ack = self
                .context
                .publish(subject, Bytes::copy_from_slice(payload))
                .await
                .map_err(|error| anyhow::anyhow!("NATS publish: {error}"))?;
            Ok(async move { ack.await.map(drop).map_err(|error| anyhow::anyhow!("NATS publish ack: {error}")) }.boxed())
        }
        .boxed()
    }

    fn flush(&self) -> BoxFuture<'_, anyhow::Result<()>> {
        async move { self.client.flush().await.map_err(|error| anyhow::anyhow!("NATS flush: {error}")) }.boxed()
    }
}

struct NatsSubscriber {
    messages: consumer::pull::Ordered,
}

/// Messages handed over per poll at most, once the first has arrived.
const POLL_MESSAGES_MAX: usize = 4096;

impl Subscriber for NatsSubscriber {
    fn poll<'a>(
        &'a mut self,
        timeout: Duration,
        sink: &'a mut (dyn FnMut(&[u8]) + Send),
    ) -> BoxFuture<'a, anyhow::Result<usize>> {
        async move {
            let first = match tokio::time::timeout(timeout, self.messages.next()).await {
                Err(_elapsed) => return Ok(0),
                Ok(None) => anyhow::bail!("NATS ordered consumer ended"),
                Ok(Some(message)) => message.map_err(|error| anyhow::anyhow!("NATS consume: {error}"))?,
            };
            sink(&first.payload);
            let mut count = 1;
            while count < POLL_MESSAGES_MAX {
                match self.messages.next().now_or_never() {
                    Some(Some(message)) => {
                        sink(&message.map_err(|error| anyhow::anyhow!("NATS consume: {error}"))?.payload);
                        count += 1;
                    }
                    Some(None) => anyhow::bail!("NATS ordered consumer ended"),
                    None => break,
                }
            }
            Ok(count)
        }
        .boxed()
    }
}
