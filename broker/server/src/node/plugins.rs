//! Plugins and transforms on [`Node`]: the requests that cross concerns (a
//! plugin in use by a transform cannot be deleted, interceptors attach to
//! existing topics, transforms read and write existing topics). Requests that
//! concern the registry alone go to [`Node::plugins`] directly.

use super::*;

impl Node {
    /// The plugins this broker runs, as the cluster metadata says: listings,
    /// logs, plugin bytes, the interceptor calls.
    pub fn plugins(&self) -> &Plugins {
        &self.plugins
    }

    /// Uploads a plugin: validated and stored on this broker by digest, then
    /// registered through the controller; every broker then runs it, fetching
    /// the bytes from this one. New code under an attached name must accept
    /// every attachment's configuration, or nothing changes.
    pub async fn upload_plugin(&self, name: &str, hook: &str, wasm: Vec<u8>) -> Result<PluginSummary, ApiError> {
        validate_name(name)?;
        let plugins = self.plugins.clone();
        let hook = hook.to_owned();
        let stored = blocking(move || plugins.store(&hook, &wasm)).await?;
        let registered = self.register_upload(name, &stored).await;
        self.plugins.unpin(&stored.digest);
        // A timeout may still commit: the bytes stay (another broker may come to
        // fetch them). Anything else was refused for good.
        let refused = registered.as_ref().is_err_and(|error| error.code != ErrorCode::RequestTimedOut);
        if refused {
            let controller = self.controller.clone();
            let is_registered = move |digest: &str| {
                controller.read(|image| image.plugins.values().any(|plugin| plugin.digest == digest))
            };
            let plugins = self.plugins.clone();
            let digest = stored.digest.clone();
            let discard = move || {
                plugins.discard_unregistered(&digest, is_registered);
                Ok::<(), ApiError>(())
            };
            let _ = blocking(discard).await;
        }
        registered
    }

    /// Registers a stored upload under `name` (see [`Node::upload_plugin`]).
    async fn register_upload(&self, name: &str, stored: &StoredUpload) -> Result<PluginSummary, ApiError> {
        let (attached, registered_hook) = self.controller.read(|image| {
            let attached: Vec<(String, Vec<(String, String)>)> = image
                .attached_to(name)
                .map(|attachment| (attachment.topic.clone(), attachment.config.clone()))
                .collect();
            (attached, image.plugins.get(name).map(|plugin| plugin.hook.clone()))
        });
        if !attached.is_empty() && registered_hook.as_deref() == Some(stored.hook) {
            let plugins = self.plugins.clone();
            let digest = stored.digest.clone();
            blocking(move || plugins.check_configs(&digest, &attached)).await?;
        }
        let entry = PluginEntry {
            name: name.to_owned(),
            hook: stored.hook.to_owned(),
            digest: stored.digest.clone(),
            size_bytes: stored.size_bytes,
            uploaded_ms: self.clock.now_ms(),
            uploaded_by: Some(self.broker.id),
        };
        self.request(&ControllerRequest::RegisterPlugin(entry)).await?;
        self.follow_plugins().await;
        self.plugins.note_upload(name, stored);
        self.plugins.summary(name).ok_or_else(|| {
            ApiError::new(ErrorCode::UnknownServerError, format!("plugin {name:?} was registered but is not loaded"))
        })
    }

    /// Removes a plugin attached nowhere and run by no transform.
    pub async fn delete_plugin(&self, name: &str) -> Result<(), ApiError> {
        let users = self.transforms.uses_plugin(name);
        if !users.is_empty() {
            let message = format!("plugin {name:?} runs in transform(s) {users:?}; delete them first");
            return Err(ApiError::new(ErrorCode::PluginInUse, message));
        }
        self.request(&ControllerRequest::RemovePlugin { name: name.to_owned() }).await?;
        self.follow_plugins().await;
        Ok(())
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
        blocking(move || node.transforms.deploy(&node, spec, producer_ids)).await
    }

    pub fn list_transforms(&self) -> Vec<TransformStatus> {
        self.transforms.list(self)
    }

    pub fn control_transform(&self, name: &str, action: &str, offset: i64) -> Result<(), ApiError> {
        Ok(self.transforms.control(name, action, offset)?)
    }

    /// Stops the transforms' tasks (before the partitions close).
    pub fn stop_transforms(&self) {
        self.transforms.stop_all();
    }

    /// Starts the deployed transforms' tasks on `runtime` (the server does, at serve).
    pub fn start_transforms(self: &Arc<Self>, runtime: tokio::runtime::Handle) {
        self.transforms.start_all(self, runtime);
    }

    /// Attaches an interceptor (or sets the partitioner) of an existing,
    /// non-internal topic, on every broker. `init(config)` runs here first, so a
    /// refused configuration fails the request.
    pub async fn attach_plugin(
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
        let hook = hook_name(hook)?;
        if hook == plugin_host::HookKind::Transform {
            let message = "a transform is deployed (weir transform deploy), not attached to a topic";
            return Err(ApiError::new(ErrorCode::InvalidRequest, message));
        }
        let policy = FailurePolicy::parse(policy)?;
        self.topic(topic)?;
        let registered = self.controller.read(|image| image.plugins.get(plugin).cloned());
        if let Some(registered) = registered.filter(|registered| registered.hook == hook.name()) {
            // Registered a moment ago through another broker: fetch it now.
            if self.plugins.wasm(&registered.digest).is_err() && self.fetch_plugin(&registered).await {
                self.follow_plugins().await;
            }
            let plugins = self.plugins.clone();
            let configs = vec![(topic.to_owned(), config.clone())];
            blocking(move || plugins.check_configs(&registered.digest, &configs)).await?;
        }
        let entry = AttachmentEntry {
            topic: topic.to_owned(),
            hook: hook.name().to_owned(),
            plugin: plugin.to_owned(),
            config,
            policy: policy.name().to_owned(),
        };
        self.request(&ControllerRequest::AttachPlugin(entry)).await?;
        self.follow_plugins().await;
        Ok(())
    }

    /// Detaches an interceptor or partitioner from a topic, on every broker.
    pub async fn detach_plugin(&self, topic: &str, hook: &str, plugin: &str) -> Result<(), ApiError> {
        let hook = hook_name(hook)?.name().to_owned();
        let request = ControllerRequest::DetachPlugin { topic: topic.to_owned(), hook, plugin: plugin.to_owned() };
        self.request(&request).await?;
        self.follow_plugins().await;
        Ok(())
    }

    /// Makes the plugins this broker runs match the applied metadata (see
    /// `Plugins::follow`); when it lacks the bytes of a registered plugin, wakes
    /// [`Node::fetch_plugins`]. Returns whether some are missing.
    pub(super) async fn follow_plugins(&self) -> bool {
        let plugins = self.plugins.clone();
        let controller = self.controller.clone();
        let image = move || controller.read(|image| (image.plugins.clone(), image.attachments.clone()));
        let missing = blocking(move || Ok::<_, ApiError>(plugins.follow(image))).await.unwrap_or_default();
        if !missing.is_empty() {
            self.plugins_wanted.notify_one();
        }
        !missing.is_empty()
    }

    /// Fetches the bytes of registered plugins this broker lacks from other
    /// brokers (the uploading one first), verified by digest, then follows
    /// again; retries every second while some are missing. Runs until aborted,
    /// apart from the metadata watch, so a plugin that cannot be fetched never
    /// delays partitions following the metadata.
    pub async fn fetch_plugins(self: Arc<Self>) {
        loop {
            let missing = self.plugins.missing();
            if missing.is_empty() {
                self.plugins_wanted.notified().await;
                continue;
            }
            let mut fetched = false;
            for entry in &missing {
                fetched |= self.fetch_plugin(entry).await;
            }
            if fetched {
                self.follow_plugins().await;
                continue;
            }
            let _ = tokio::time::timeout(PLUGIN_FETCH_RETRY, self.plugins_wanted.notified()).await;
        }
    }

    /// The bytes of a plugin by digest (`fetchPlugin`, for clients running a
    /// partitioner): from this broker, or fetched from another one first when
    /// the plugin is registered but not here yet.
    pub async fn plugin_wasm(&self, digest: &str) -> Result<Vec<u8>, ApiError> {
        let read = || {
            let (plugins, digest) = (self.plugins.clone(), digest.to_owned());
            blocking(move || plugins.wasm(&digest))
        };
        if let Ok(wasm) = read().await {
            return Ok(wasm);
        }
        let registered =
            self.controller.read(|image| image.plugins.values().find(|plugin| plugin.digest == digest).cloned());
        if let Some(entry) = registered {
            if self.fetch_plugin(&entry).await {
                self.follow_plugins().await;
            }
        }
        read().await
    }

    /// Fetches and stores the bytes of `entry` from another broker.
    pub(super) async fn fetch_plugin(&self, entry: &PluginEntry) -> bool {
        let mut sources: Vec<(i32, String)> = self.controller.read(|image| {
            image
                .brokers
                .values()
                .filter(|broker| broker.registration.broker_id != self.broker.id)
                .map(|broker| {
                    let registration = &broker.registration;
                    (registration.broker_id, format!("{}:{}", registration.host, registration.port))
                })
                .collect()
        });
        // The uploading broker first.
        sources.sort_by_key(|(broker_id, _)| Some(*broker_id) != entry.uploaded_by);
        for (broker_id, address) in sources {
            let call = self.controller.call_broker(
                broker_id as u64,
                &address,
                RaftCallKind::FetchPlugin,
                entry.digest.clone().into_bytes(),
            );
            let bytes = match call.await {
                Ok(bytes) => bytes,
                Err(error) => {
                    tracing::debug!(plugin = %entry.name, broker_id, %error, "plugin bytes not fetched");
                    continue;
                }
            };
            let plugins = self.plugins.clone();
            let digest = entry.digest.clone();
            match blocking(move || plugins.store_fetched(&digest, &bytes)).await {
                Ok(_) => {
                    tracing::info!(plugin = %entry.name, digest = %entry.digest, from = broker_id, "plugin fetched");
                    return true;
                }
                Err(error) => tracing::warn!(plugin = %entry.name, broker_id, %error, "fetched plugin refused"),
            }
        }
        tracing::warn!(plugin = %entry.name, digest = %entry.digest, "no broker could send this plugin's bytes yet");
        false
    }

    /// Moves a registry kept by this broker before plugins joined the cluster
    /// metadata (`plugins/registry.json`) into it: every plugin whose bytes are
    /// here and every attachment the metadata does not have yet; then the file
    /// is set aside (`registry.json.upgraded`).
    pub(super) async fn upgrade_plugin_registry(&self) -> Result<(), NodeError> {
        let legacy = self.plugins.legacy_registry()?;
        let Some(legacy) = legacy else { return Ok(()) };
        // A change the metadata refuses for good (a topic gone since) is logged
        // and skipped; any other failure stops the start, and the file stays for
        // the next one (a validator is never silently dropped).
        let moved = |what: &str, outcome: Result<ControllerResponse, ApiError>| match outcome {
            Ok(_) => Ok(()),
            Err(error) if error.code == ErrorCode::RequestTimedOut || error.code == ErrorCode::StorageError => Err(
                NodeError::Controller(format!("moving plugin {what:?} into the cluster metadata: {}", error.message)),
            ),
            Err(error) => {
                tracing::warn!(plugin = what, %error, "not moved into the cluster metadata: refused");
                Ok(())
            }
        };
        for plugin in legacy.plugins {
            let known = self.controller.read(|image| image.plugins.get(&plugin.name).map(|known| known.digest.clone()));
            if let Some(known) = known {
                if known != plugin.digest {
                    tracing::warn!(plugin = %plugin.name, kept = %known, "the cluster has other code under this name");
                }
                continue;
            }
            if self.plugins.wasm(&plugin.digest).is_err() {
                tracing::warn!(plugin = %plugin.name, digest = %plugin.digest, "plugin bytes missing; not registered");
                continue;
            }
            let entry = PluginEntry {
                name: plugin.name.clone(),
                hook: plugin.hook,
                digest: plugin.digest,
                size_bytes: plugin.size_bytes,
                uploaded_ms: plugin.uploaded_ms,
                uploaded_by: Some(self.broker.id),
            };
            moved(&plugin.name, self.request(&ControllerRequest::RegisterPlugin(entry)).await)?;
        }
        for attachment in legacy.attachments {
            let known = self.controller.read(|image| {
                image
                    .attached_to(&attachment.plugin)
                    .any(|known| known.topic == attachment.topic && known.hook == attachment.hook)
            });
            if known {
                continue;
            }
            let entry = AttachmentEntry {
                topic: attachment.topic.clone(),
                hook: attachment.hook,
                plugin: attachment.plugin.clone(),
                config: attachment.config,
                policy: attachment.policy.name().to_owned(),
            };
            moved(&attachment.plugin, self.request(&ControllerRequest::AttachPlugin(entry)).await)?;
        }
        self.plugins.legacy_registry_upgraded()?;
        tracing::info!("plugin registry moved into the cluster metadata (registry.json.upgraded)");
        Ok(())
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
                Err(error) => *answer = Err(error.into()),
            }
        }
    }
}

impl Node {
    /// Transforms are still kept by each broker: in a cluster a transform would
    /// read partitions led elsewhere. Refused until they move into the cluster
    /// metadata.
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
        Ok(self.plugins.start_transform(plugin, config)?)
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
        Ok(self.plugins.partition(topic, partition_count, record)?)
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

/// Runs blocking plugin work (compiling, instantiating, file IO) off the
/// runtime's workers.
async fn blocking<T: Send + 'static, E: Into<ApiError> + Send + 'static>(
    work: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, ApiError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(done) => done.map_err(Into::into),
        Err(error) => Err(ApiError::new(ErrorCode::UnknownServerError, format!("plugin task failed: {error}"))),
    }
}
