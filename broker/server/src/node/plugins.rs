//! Plugins and transforms on [`Node`]: the requests that cross concerns (a
//! plugin in use by a transform cannot be deleted, interceptors attach to
//! existing topics, transforms read and write existing topics). Requests that
//! concern the registry alone go to [`Node::plugins`] directly.

use super::*;

impl Node {
    /// The plugin registry and the running plugins: uploads, listings, logs,
    /// plugin bytes, detaching.
    pub fn plugins(&self) -> &Plugins {
        &self.plugins
    }

    pub fn delete_plugin(&self, name: &str) -> Result<(), ApiError> {
        let users = self.transforms.uses_plugin(name);
        if !users.is_empty() {
            let message = format!("plugin {name:?} runs in transform(s) {users:?}; delete them first");
            return Err(ApiError::new(ErrorCode::PluginInUse, message));
        }
        self.plugins.delete(name)
    }

    /// Partitions of a topic.
    pub fn partition_count(&self, topic: &str) -> Result<u32, ApiError> {
        Ok(self.topic(topic)?.slots.len() as u32)
    }

    /// Deploys a transform (see [`crate::transforms`]).
    pub async fn deploy_transform(self: &Arc<Self>, spec: TransformSpec) -> Result<(), ApiError> {
        self.refuse_in_a_cluster("transforms")?;
        for topic in std::iter::once(&spec.input_topic).chain(&spec.output_topics) {
            if is_internal(topic) {
                return Err(ApiError::new(ErrorCode::InvalidTopic, format!("{topic:?} is an internal topic")));
            }
            self.topic(topic)?;
        }
        let partitions = self.partition_count(&spec.input_topic)? as i32;
        // One idempotent producer per input partition (its outputs dedup on retry).
        let mut producer_ids = BTreeMap::new();
        for partition in 0..partitions {
            producer_ids.insert(partition, self.init_producer_id().await?.0);
        }
        let node = self.clone();
        tokio::task::spawn_blocking(move || node.transforms.deploy(&node, spec, producer_ids)).await.unwrap_or_else(
            |error| Err(ApiError::new(ErrorCode::UnknownServerError, format!("deploying failed: {error}"))),
        )
    }

    pub fn list_transforms(&self) -> Vec<TransformStatus> {
        self.transforms.list(self)
    }

    pub fn control_transform(&self, name: &str, action: &str, offset: i64) -> Result<(), ApiError> {
        self.transforms.control(name, action, offset)
    }

    /// Stops the transforms' tasks (before the partitions close).
    pub fn stop_transforms(&self) {
        self.transforms.stop_all();
    }

    /// Starts the deployed transforms' tasks on `runtime` (the server does, at serve).
    pub fn start_transforms(self: &Arc<Self>, runtime: tokio::runtime::Handle) {
        self.transforms.start_all(self, runtime);
    }

    /// Attaches an interceptor to an existing, non-internal topic.
    pub fn attach_plugin(
        &self,
        topic: &str,
        hook: &str,
        plugin: &str,
        config: Vec<(String, String)>,
        policy: &str,
    ) -> Result<(), ApiError> {
        if is_internal(topic) {
            return Err(ApiError::new(ErrorCode::InvalidTopic, format!("{topic:?} is an internal topic")));
        }
        self.refuse_in_a_cluster("plugin attachments")?;
        self.topic(topic)?;
        self.plugins.attach(topic, hook, plugin, config, FailurePolicy::parse(policy)?)
    }

    /// Runs consume interceptors over fetched answers (`buffers[i]` holds
    /// partition `i`'s bytes); a failure becomes that partition's answer.
    pub fn intercept_fetched(
        &self,
        partitions: &[PartitionFetch],
        group: Option<&str>,
        answers: &mut [Result<Fetched, ApiError>],
        buffers: &mut [Vec<u8>],
    ) {
        for ((fetch, answer), buffer) in partitions.iter().zip(answers.iter_mut()).zip(buffers.iter_mut()) {
            let Ok(fetched) = answer else { continue };
            if fetched.size_bytes == 0 || !self.plugins.intercepts_fetches(&fetch.topic) {
                continue;
            }
            match self.plugins.intercept_fetch(&fetch.topic, fetch.partition, group, &buffer[..fetched.size_bytes]) {
                Ok(Some(rewritten)) => {
                    fetched.size_bytes = rewritten.len();
                    buffer.clear();
                    buffer.extend_from_slice(&rewritten);
                }
                Ok(None) => {}
                Err(error) => *answer = Err(error),
            }
        }
    }
}

impl Node {
    /// Plugins and transforms are still kept by each broker: in a cluster an
    /// interceptor attached on one broker would not run on the others (a policy
    /// bypassed), and a transform would read partitions led elsewhere. Refused
    /// until they move into the cluster metadata.
    fn refuse_in_a_cluster(&self, what: &str) -> Result<(), ApiError> {
        let brokers = self.controller.voters().len() + self.controller.learners().len();
        if brokers <= 1 {
            return Ok(());
        }
        let message = format!(
            "{what} are kept by each broker and not yet supported in a cluster of {brokers} brokers \
             (they will move into the cluster metadata)"
        );
        Err(ApiError::new(ErrorCode::InvalidRequest, message))
    }
}

impl TransformHost for Node {
    fn start_transform_plugin(
        &self,
        plugin: &str,
        config: Vec<(String, String)>,
    ) -> Result<plugin_host::Plugin, ApiError> {
        self.plugins.start_transform(plugin, config)
    }

    fn list_offset(&self, topic: &str, partition: i32, query: OffsetQuery) -> Result<(i64, i64), ApiError> {
        Node::list_offset(self, topic, partition, query)
    }

    fn partition_count(&self, topic: &str) -> Result<u32, ApiError> {
        Node::partition_count(self, topic)
    }

    fn plugin_partition(
        &self,
        topic: &str,
        partition_count: u32,
        record: &plugin_host::PackedRecord<'_>,
    ) -> Result<Option<u32>, ApiError> {
        self.plugins.partition(topic, partition_count, record)
    }

    async fn fetch_many(
        &self,
        partitions: &[PartitionFetch],
        min_bytes: u32,
        max_wait_ms: u32,
        max_bytes: u32,
        buffers: &mut Vec<Vec<u8>>,
    ) -> Vec<Result<Fetched, ApiError>> {
        Node::fetch_many(self, partitions, min_bytes, max_wait_ms, max_bytes, buffers).await
    }

    async fn produce(&self, request: ProduceRequest) -> Result<Produced, ApiError> {
        Node::produce(self, request).await
    }
}
