//! [`Admin`]: topic management (create, list, describe, delete, alter configs)
//! and cluster metadata. Each call goes to any reachable broker; answers are
//! plain Rust values, failures typed [`ClientError`]s.

use std::sync::Arc;
use std::time::Duration;

use abi::weir_capnp::{admin, broker};

use crate::cluster::{read_partition_metadata, BrokerInfo, Cluster, PartitionInfo, TopicInfo};
use crate::config::CommonConfig;
use crate::connection::Connection;
use crate::error::{broker_error, ClientError};

/// A topic to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewTopic {
    pub name: String,
    pub partition_count: i32,
    /// -1 = the broker's default.
    pub replication_factor: i16,
    /// Kafka-style topic configs (`retention.ms`, `segment.bytes`, …).
    pub configs: Vec<(String, String)>,
}

impl NewTopic {
    pub fn new(name: impl Into<String>, partition_count: i32) -> NewTopic {
        NewTopic { name: name.into(), partition_count, replication_factor: -1, configs: Vec::new() }
    }

    pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> NewTopic {
        self.configs.push((key.into(), value.into()));
        self
    }
}

/// A topic's partitions and effective configs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicDescription {
    pub name: String,
    pub partitions: Vec<PartitionInfo>,
    pub configs: Vec<(String, String)>,
}

/// Brokers and topics as the cluster reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterDescription {
    pub brokers: Vec<BrokerInfo>,
    pub topics: Vec<Arc<TopicInfo>>,
}

/// Administers a cluster; see the module docs.
#[derive(Clone, Debug)]
pub struct Admin {
    cluster: Arc<Cluster>,
    request_timeout: Duration,
}

impl Admin {
    pub fn new(config: CommonConfig) -> Result<Admin, ClientError> {
        let cluster = Cluster::new(&config.bootstrap_servers, config.connect_timeout)?;
        Ok(Admin { cluster, request_timeout: config.request_timeout })
    }

    /// An admin sharing `cluster` with other clients.
    pub fn with_cluster(cluster: Arc<Cluster>, request_timeout: Duration) -> Admin {
        Admin { cluster, request_timeout }
    }

    /// Runs `call` with the `Admin` capability of any broker.
    async fn with_admin<T, F, Fut>(&self, operation: &'static str, call: F) -> Result<T, ClientError>
    where
        T: Send + 'static,
        F: FnOnce(admin::Client, String) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, ClientError>> + 'static,
    {
        let connection: Connection = self.cluster.any_connection().await?;
        let address = connection.address().to_owned();
        let work = connection.call(move |client: broker::Client| async move {
            let admin = client.admin_request().send().pipeline.get_admin();
            call(admin, address).await
        });
        match tokio::time::timeout(self.request_timeout, work).await {
            Ok(outcome) => outcome,
            Err(_) => Err(ClientError::Timeout { operation, timeout_ms: self.request_timeout.as_millis() as u64 }),
        }
    }

    pub async fn create_topic(&self, topic: NewTopic) -> Result<(), ClientError> {
        let name = topic.name.clone();
        self.with_admin("create topic", move |admin, address| async move {
            let mut request = admin.create_topic_request();
            let mut spec = request.get().init_spec();
            spec.set_name(&topic.name[..]);
            spec.set_partition_count(topic.partition_count);
            spec.set_replication_factor(topic.replication_factor);
            let mut configs = spec.init_configs(topic.configs.len() as u32);
            for (index, (key, value)) in topic.configs.iter().enumerate() {
                let mut entry = configs.reborrow().get(index as u32);
                entry.set_key(&key[..]);
                entry.set_value(&value[..]);
            }
            let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
            let response = response.get()?;
            match response.has_error() {
                true => Err(broker_error(response.get_error()?)),
                false => Ok(()),
            }
        })
        .await?;
        self.cluster.invalidate(&name);
        Ok(())
    }

    pub async fn delete_topic(&self, name: &str) -> Result<(), ClientError> {
        let topic = name.to_owned();
        self.with_admin("delete topic", move |admin, address| async move {
            let mut request = admin.delete_topic_request();
            request.get().set_name(&topic[..]);
            let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
            let response = response.get()?;
            match response.has_error() {
                true => Err(broker_error(response.get_error()?)),
                false => Ok(()),
            }
        })
        .await?;
        self.cluster.invalidate(name);
        Ok(())
    }

    /// Topic names, sorted.
    pub async fn list_topics(&self) -> Result<Vec<String>, ClientError> {
        self.with_admin("list topics", move |admin, address| async move {
            let response = admin
                .list_topics_request()
                .send()
                .promise
                .await
                .map_err(|error| ClientError::from_rpc(&address, error))?;
            let names = response.get()?.get_names()?;
            names.iter().map(|name| Ok(name?.to_str()?.to_owned())).collect()
        })
        .await
    }

    pub async fn describe_topic(&self, name: &str) -> Result<TopicDescription, ClientError> {
        let topic = name.to_owned();
        self.with_admin("describe topic", move |admin, address| async move {
            let mut request = admin.describe_topic_request();
            request.get().set_name(&topic[..]);
            let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
            let response = response.get()?;
            if response.has_error() {
                return Err(broker_error(response.get_error()?));
            }
            let description = response.get_description()?;
            let partitions =
                description.get_partitions()?.iter().map(read_partition_metadata).collect::<Result<_, _>>()?;
            let configs = description
                .get_configs()?
                .iter()
                .map(|entry| Ok((entry.get_key()?.to_str()?.to_owned(), entry.get_value()?.to_str()?.to_owned())))
                .collect::<Result<_, ClientError>>()?;
            Ok(TopicDescription { name: description.get_name()?.to_str()?.to_owned(), partitions, configs })
        })
        .await
    }

    /// Sets config overrides; an empty value resets the key to the broker default.
    pub async fn alter_topic_config(&self, name: &str, configs: Vec<(String, String)>) -> Result<(), ClientError> {
        let topic = name.to_owned();
        self.with_admin("alter topic config", move |admin, address| async move {
            let mut request = admin.alter_topic_config_request();
            let mut params = request.get();
            params.set_name(&topic[..]);
            let mut entries = params.init_configs(configs.len() as u32);
            for (index, (key, value)) in configs.iter().enumerate() {
                let mut entry = entries.reborrow().get(index as u32);
                entry.set_key(&key[..]);
                entry.set_value(&value[..]);
            }
            let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
            let response = response.get()?;
            match response.has_error() {
                true => Err(broker_error(response.get_error()?)),
                false => Ok(()),
            }
        })
        .await
    }

    /// Brokers and every topic with its partitions and leaders.
    pub async fn describe_cluster(&self) -> Result<ClusterDescription, ClientError> {
        let topics = self.cluster.refresh(&[]).await?;
        Ok(ClusterDescription { brokers: self.cluster.brokers(), topics })
    }

    /// The log start offset and high watermark of a partition.
    pub async fn watermarks(&self, topic: &str, partition: i32) -> Result<(i64, i64), ClientError> {
        use crate::consumer::{list_offset, Offset};
        let start = list_offset(&self.cluster, topic, partition, Offset::Beginning).await?;
        let end = list_offset(&self.cluster, topic, partition, Offset::End).await?;
        Ok((start, end))
    }
}
