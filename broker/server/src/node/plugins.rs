//! Plugins and transforms on [`Node`]: the requests that cross concerns (a
//! plugin in use by a transform cannot be deleted, interceptors attach to
//! existing topics, transforms read and write existing topics). Requests that
//! concern the registry alone go to [`Node::plugins`] directly.

use super::*;

/// How [`Node::begin_plugin_upload`] answered.
#[derive(Debug)]
pub enum BeginUpload {
    /// Send the chunks of this upload.
    Started(u64),
    /// The plugin has these bytes already.
    Existing(PluginSummary),
}

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
        let (wasm, digest) = blocking(move || {
            let digest = plugin_host::hex_sha256(&wasm);
            Ok::<_, ApiError>((wasm, digest))
        })
        .await?;
        self.upload_plugin_with_digest(name, hook, wasm, &digest).await
    }

    /// [`Node::upload_plugin`] of bytes whose SHA-256 is known, under a name
    /// already checked.
    async fn upload_plugin_with_digest(
        &self,
        name: &str,
        hook: &str,
        wasm: Vec<u8>,
        digest: &str,
    ) -> Result<PluginSummary, ApiError> {
        if let Some(summary) = self.already_uploaded(name, hook, digest) {
            return Ok(summary);
        }
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

    /// The plugin `name` when it already runs exactly the bytes of `digest` as
    /// `hook` (empty: any): uploading them again changes nothing. Bytes that
    /// did not compile are taken again: storing them compiles them again.
    fn already_uploaded(&self, name: &str, hook: &str, digest: &str) -> Option<PluginSummary> {
        let registered = self.controller.read(|image| {
            image
                .plugins
                .get(name)
                .is_some_and(|plugin| plugin.digest == digest && (hook.is_empty() || plugin.hook == hook))
        });
        if !registered {
            return None;
        }
        self.plugins.summary(name).filter(|summary| summary.digest == digest && summary.state != "failed")
    }

    /// Starts an upload in chunks (see [`uploads`]): its id, or the plugin
    /// when it already has exactly the announced bytes (nothing to send).
    pub fn begin_plugin_upload(&self, announced: uploads::Announced) -> Result<BeginUpload, ApiError> {
        validate_name(&announced.name)?;
        if !announced.hook.is_empty() {
            hook_name(&announced.hook)?;
        }
        if let Some(summary) = self.already_uploaded(&announced.name, &announced.hook, &announced.digest) {
            return Ok(BeginUpload::Existing(summary));
        }
        let now_ms = self.clock.now_ms();
        lock(&self.uploads).begin(announced, now_ms).map(BeginUpload::Started)
    }

    /// Appends a chunk to an upload.
    pub fn upload_plugin_chunk(&self, id: u64, offset: u64, data: &[u8]) -> Result<(), ApiError> {
        let now_ms = self.clock.now_ms();
        lock(&self.uploads).append(id, offset, data, now_ms)
    }

    /// Ends an upload: its bytes, checked against what was announced, are
    /// uploaded as by [`Node::upload_plugin`].
    pub async fn finish_plugin_upload(&self, id: u64) -> Result<PluginSummary, ApiError> {
        let now_ms = self.clock.now_ms();
        let (announced, wasm) = lock(&self.uploads).finish(id, now_ms)?;
        // Counted as in progress until registered, or abandoned with the call.
        struct Done<'a>(&'a Mutex<uploads::PendingUploads>, u64);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                lock(self.0).done(self.1);
            }
        }
        let _done = Done(&self.uploads, id);
        self.upload_plugin_with_digest(&announced.name, &announced.hook, wasm, &announced.digest).await
    }

    /// Waits for the code of `digest` to compile on this broker (see
    /// [`CodeState`]): `Ok` when it is ready or not stored here (the caller's
    /// next step says so), `InvalidPlugin` with the reason when it failed.
    pub(super) async fn plugin_code(&self, digest: &str) -> Result<(), ApiError> {
        let mut compile_ends = self.plugins.compile_ends();
        loop {
            let (plugins, owned) = (self.plugins.clone(), digest.to_owned());
            match blocking(move || Ok::<_, ApiError>(plugins.code_state(&owned))).await? {
                CodeState::Ready | CodeState::Missing => return Ok(()),
                CodeState::Failed(reason) => {
                    let message = format!("plugin {digest} did not compile: {reason}");
                    return Err(ApiError::new(ErrorCode::InvalidPlugin, message));
                }
                CodeState::Compiling => {
                    if compile_ends.changed().await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Follows the plugin registry again each time a background compile ends,
    /// so attachments and transforms waiting for that code start (and once
    /// at the start: a compile may have ended before this looked). Runs until
    /// aborted.
    pub async fn follow_compiles(self: Arc<Self>) {
        let mut compile_ends = self.plugins.compile_ends();
        loop {
            self.follow_plugins().await;
            self.follow_transforms().await;
            if compile_ends.changed().await.is_err() {
                return;
            }
        }
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
            // New code under an attached name: checked against every
            // attachment's configuration, so this upload waits for its compile.
            self.plugin_code(&stored.digest).await?;
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
        self.request(&ControllerRequest::RemovePlugin { name: name.to_owned() }).await?;
        self.follow_plugins().await;
        Ok(())
    }

    /// Partitions of a topic.
    pub fn partition_count(&self, topic: &str) -> Result<u32, ApiError> {
        Ok(self.topic(topic)?.slots.len() as u32)
    }

    /// Deploys a transform (see [`crate::transforms`]) on the whole cluster:
    /// one producer id per input partition, `init(config)` checked here, then
    /// recorded by the controller; the leader of each input partition runs it.
    pub async fn deploy_transform(self: &Arc<Self>, spec: TransformSpec) -> Result<(), ApiError> {
        crate::transforms::check_spec(&spec)?;
        for topic in std::iter::once(&spec.input_topic).chain(&spec.output_topics) {
            if is_internal(topic) {
                return Err(ApiError::new(ErrorCode::InvalidTopic, format!("{topic:?} is an internal topic")));
            }
            self.topic(topic)?;
        }
        let exists = self.controller.read(|image| image.transforms.contains_key(&spec.name));
        if exists {
            let message = format!("a transform named {:?} exists; delete it first", spec.name);
            return Err(ApiError::new(ErrorCode::InvalidRequest, message));
        }
        // `init` must accept the config before anything is recorded (with the
        // plugin's bytes fetched first if this broker lacks them yet).
        let registered = self.controller.read(|image| image.plugins.get(&spec.plugin).cloned());
        if let Some(entry) = registered {
            let (plugins, digest) = (self.plugins.clone(), entry.digest.clone());
            let here = blocking(move || plugins.wasm(&digest).map(drop)).await.is_ok();
            let fetched = !here && self.fetch_plugin(&entry).await;
            self.plugin_code(&entry.digest).await?;
            // Bytes that arrived or compiled in the background may not be
            // loaded yet: following the registry here does it now.
            let loaded = self
                .plugins
                .summary(&spec.plugin)
                .is_some_and(|summary| summary.digest == entry.digest && summary.state == "ready");
            if fetched || !loaded {
                self.follow_plugins().await;
            }
        }
        let (plugins, plugin, config) = (self.plugins.clone(), spec.plugin.clone(), spec.config.clone());
        blocking(move || plugins.start_transform(&plugin, config).map(drop)).await?;
        let partitions = self.partition_count(&spec.input_topic)?;
        // One idempotent producer per input partition (its outputs dedup on retry).
        let mut producer_ids = Vec::with_capacity(partitions as usize);
        for _ in 0..partitions {
            producer_ids.push(self.init_producer_id().await?.0);
        }
        let entry = TransformEntry {
            name: spec.name,
            plugin: spec.plugin,
            input_topic: spec.input_topic,
            output_topics: spec.output_topics,
            start: spec.start,
            config: spec.config,
            producer_ids,
            start_paused: false,
            dead_letter_topic: spec.dead_letter_topic,
        };
        self.request(&ControllerRequest::DeployTransform(entry)).await?;
        self.follow_transforms().await;
        Ok(())
    }

    /// Every deployment, with the progress of each input partition as the
    /// broker that leads it reports (asked over the broker links; a broker
    /// that does not answer shows its partitions at -1 and says so in the state).
    pub async fn list_transforms(&self) -> Vec<TransformStatus> {
        let (deployments, leaders) = self.controller.read(|image| {
            let deployments: Vec<TransformImage> = image.transforms.values().cloned().collect();
            let mut leaders: BTreeMap<i32, String> = BTreeMap::new();
            for transform in &deployments {
                let Some(topic) = image.topics.get(&transform.entry.input_topic) else { continue };
                for state in &topic.partitions {
                    if state.leader == self.broker.id {
                        continue;
                    }
                    if let Some(broker) = image.brokers.get(&state.leader) {
                        let registration = &broker.registration;
                        leaders.insert(state.leader, format!("{}:{}", registration.host, registration.port));
                    }
                }
            }
            (deployments, leaders)
        });
        let mut reports: Vec<(i32, Result<Vec<LocalStatus>, String>)> =
            vec![(self.broker.id, Ok(self.transforms.local_status(self)))];
        let asks = leaders.into_iter().map(|(broker_id, address)| async move {
            let call =
                self.controller.call_broker(broker_id as u64, &address, RaftCallKind::TransformStatus, Vec::new());
            let report = match call.await {
                Ok(bytes) => serde_json::from_slice(&bytes).map_err(|error| error.to_string()),
                Err(error) => Err(error.to_string()),
            };
            (broker_id, report)
        });
        reports.extend(futures::future::join_all(asks).await);
        deployments.into_iter().map(|transform| merge_status(transform, &reports)).collect()
    }

    /// Pauses, resumes, replays (from `offset`) or deletes a transform, on
    /// every broker that runs it.
    pub async fn control_transform(self: &Arc<Self>, name: &str, action: &str, offset: i64) -> Result<(), ApiError> {
        let request = ControllerRequest::ControlTransform { name: name.to_owned(), action: action.to_owned(), offset };
        self.request(&request).await?;
        self.follow_transforms().await;
        Ok(())
    }

    /// Stops the transforms' tasks (before the partitions close).
    pub fn stop_transforms(&self) {
        self.transforms.stop_all();
    }

    /// Lets the transforms' tasks run on `runtime` (the server does, at
    /// serve); the metadata watch then starts those of the input partitions
    /// led here.
    pub fn start_transforms(&self, runtime: tokio::runtime::Handle) {
        self.transforms.start(runtime);
    }

    /// Runs the tasks of the input partitions this broker leads, as the
    /// applied metadata says (see `Transforms::follow`), off the async workers.
    pub(super) async fn follow_transforms(self: &Arc<Self>) {
        let node = self.clone();
        let follow = move || {
            let wanted = || node.wanted_transforms();
            node.transforms.follow(&node, wanted);
            Ok::<(), ApiError>(())
        };
        let _ = blocking(follow).await;
    }

    /// Whether a transform failed to start here and should be followed again.
    pub(super) fn transforms_want_retry(&self) -> bool {
        self.transforms.wants_retry()
    }

    /// Every deployment, with the input partitions this broker leads.
    fn wanted_transforms(&self) -> Vec<Wanted> {
        self.controller.read(|image| {
            image
                .transforms
                .values()
                .map(|transform| {
                    let led = image.topics.get(&transform.entry.input_topic).map_or_else(BTreeMap::new, |topic| {
                        let partitions = topic.partitions.iter().enumerate();
                        partitions
                            .filter(|(_, state)| state.leader == self.broker.id)
                            .map(|(partition, state)| (partition as i32, state.leader_epoch))
                            .filter(|(partition, _)| (*partition as usize) < transform.entry.producer_ids.len())
                            .collect()
                    });
                    Wanted { transform: transform.clone(), led }
                })
                .collect()
        })
    }

    /// Moves the deployments a single-node broker kept (`transforms.json`)
    /// into the cluster metadata, with their producer ids, pause state and
    /// checkpoints; then sets the file aside (`transforms.json.upgraded`).
    pub(super) async fn upgrade_transforms(&self) -> Result<(), NodeError> {
        let Some(legacy) = self.transforms.legacy_deployments().map_err(NodeError::Transforms)? else {
            return Ok(());
        };
        for deployment in legacy {
            let known = self.controller.read(|image| image.transforms.get(&deployment.name).map(|t| t.entry.clone()));
            let entry = TransformEntry {
                name: deployment.name.clone(),
                plugin: deployment.plugin.clone(),
                input_topic: deployment.input_topic.clone(),
                output_topics: deployment.output_topics.clone(),
                start: deployment.start,
                config: deployment.config.clone(),
                producer_ids: deployment.producer_ids.values().copied().collect(),
                start_paused: deployment.paused,
                dead_letter_topic: None,
            };
            let ids_in_order = deployment.producer_ids.keys().copied().eq(0..deployment.producer_ids.len() as i32);
            match known {
                Some(known) if known == entry => {}
                Some(_) => {
                    tracing::warn!(transform = %deployment.name, "the cluster has another transform under this name");
                    continue;
                }
                None if !ids_in_order => {
                    tracing::warn!(transform = %deployment.name, "not moved: its producer ids do not cover 0..n");
                    continue;
                }
                None => match self.request(&ControllerRequest::DeployTransform(entry)).await {
                    Ok(_) => {}
                    Err(error) if error.code == ErrorCode::RequestTimedOut || error.code == ErrorCode::StorageError => {
                        let message = format!(
                            "moving transform {:?} into the cluster metadata: {}",
                            deployment.name, error.message
                        );
                        return Err(NodeError::Controller(message));
                    }
                    Err(error) => {
                        tracing::warn!(transform = %deployment.name, %error, "not moved into the cluster metadata: refused");
                        continue;
                    }
                },
            }
            self.transforms.adopt_legacy_checkpoints(&deployment).map_err(NodeError::Transforms)?;
        }
        self.transforms.legacy_upgraded().map_err(NodeError::Transforms)?;
        tracing::info!("transform deployments moved into the cluster metadata (transforms.json.upgraded)");
        Ok(())
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
            self.plugin_code(&registered.digest).await?;
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
                self.follow_transforms().await;
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
            let call =
                self.call_peer(broker_id, &address, RaftCallKind::FetchPlugin, entry.digest.clone().into_bytes());
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
    pub async fn intercept_fetched(
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
            match self
                .plugins
                .intercept_fetch(&fetch.topic, fetch.partition, group, &buffer[..fetched.size_bytes])
                .await
            {
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

/// One deployment as the brokers that lead its input partitions report it.
fn merge_status(transform: TransformImage, reports: &[(i32, Result<Vec<LocalStatus>, String>)]) -> TransformStatus {
    let entry = transform.entry;
    let mut partitions: BTreeMap<i32, PartitionProgress> = (0..entry.producer_ids.len() as i32)
        .map(|partition| (partition, PartitionProgress::unknown(partition)))
        .collect();
    let mut states = Vec::new();
    let mut unreachable = Vec::new();
    let mut reported = std::collections::BTreeSet::new();
    for (broker_id, report) in reports {
        let report = match report {
            Ok(report) => report,
            Err(error) => {
                unreachable.push(format!("broker {broker_id} unreachable: {error}"));
                continue;
            }
        };
        let Some(local) =
            report.iter().find(|local| local.name == entry.name && local.producer_ids == entry.producer_ids)
        else {
            continue;
        };
        for progress in &local.partitions {
            partitions.insert(progress.partition, *progress);
            reported.insert(progress.partition);
        }
        let trouble = local.state.starts_with("retrying") || local.state.starts_with("failed");
        if trouble && (!local.partitions.is_empty() || local.state.starts_with("failed")) {
            states.push(format!("{} (broker {broker_id})", local.state));
        }
    }
    // A partition nobody reported: its leader did not answer (or it has none).
    let silent = reported.len() < partitions.len();
    let state = match (silent.then(|| unreachable.first()).flatten(), transform.paused, states.first()) {
        (Some(unreachable), _, _) => unreachable.clone(),
        (None, true, _) => "paused".to_owned(),
        (None, false, Some(first)) => first.clone(),
        (None, false, None) => "running".to_owned(),
    };
    TransformStatus {
        name: entry.name,
        plugin: entry.plugin,
        input_topic: entry.input_topic,
        output_topics: entry.output_topics,
        dead_letter_topic: entry.dead_letter_topic,
        state,
        partitions: partitions.into_values().collect(),
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

    async fn plugin_partitions(
        &self,
        topic: &str,
        partition_count: u32,
        records: &[&plugin_host::PackedRecord<'_>],
    ) -> Result<Option<Vec<Option<u32>>>, ApiError> {
        Ok(self.plugins.partitions(topic, partition_count, records).await?)
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

    /// Here when this broker leads the partition (or nobody does: the answer
    /// says so), else forwarded to its leader.
    async fn produce(&self, request: ProduceRequest) -> Result<Produced, ApiError> {
        let leader = self.controller.read(|image| {
            let state = image.partition(&request.topic, request.partition.max(0) as u32).ok()?;
            let broker = image.brokers.get(&state.leader)?;
            Some((state.leader, format!("{}:{}", broker.registration.host, broker.registration.port)))
        });
        match leader {
            Some((leader, address)) if leader != self.broker.id => {
                let call = self.call_peer(leader, &address, RaftCallKind::Produce, encode_forwarded_produce(&request));
                let answer = call.await.map_err(|error| {
                    ApiError::new(ErrorCode::NetworkError, format!("forwarding to broker {leader}: {error}"))
                })?;
                decode_forwarded_answer(&answer)
            }
            _ => Node::produce(self, request).await,
        }
    }

    /// Here when this broker coordinates the group, else forwarded to the
    /// broker that does.
    async fn checkpoint(&self, call: CheckpointCall) -> Result<Option<(i64, String)>, ApiError> {
        let group_id = match &call {
            CheckpointCall::Load { group_id, .. }
            | CheckpointCall::Save { group_id, .. }
            | CheckpointCall::Delete { group_id } => group_id,
        };
        let coordinator = self.find_coordinator(group_id)?;
        if coordinator.id == self.broker.id {
            return self.answer_checkpoint(call).await;
        }
        let address = format!("{}:{}", coordinator.host, coordinator.port);
        let payload = serde_json::to_vec(&call).unwrap_or_default();
        let answer = self.call_peer(coordinator.id, &address, RaftCallKind::Checkpoint, payload).await;
        let answer = answer.map_err(|error| {
            ApiError::new(ErrorCode::NetworkError, format!("a checkpoint call to broker {}: {error}", coordinator.id))
        })?;
        let answer: CheckpointAnswer = serde_json::from_slice(&answer).map_err(|error| {
            ApiError::new(ErrorCode::UnknownServerError, format!("a checkpoint call's answer: {error}"))
        })?;
        answer.map_err(from_peer_error)
    }
}

/// The answer to a forwarded [`CheckpointCall`].
type CheckpointAnswer = Result<Option<(i64, String)>, PeerError>;

impl Node {
    /// Carries out a transform checkpoint call as the coordinator of its group
    /// (`NotCoordinator` when this broker is not).
    async fn answer_checkpoint(&self, call: CheckpointCall) -> Result<Option<(i64, String)>, ApiError> {
        // Calls of this kind come from other brokers, but the port is the
        // clients' too: only checkpoint groups, and no epoch from the future.
        let (group_id, input) = match &call {
            CheckpointCall::Load { group_id, topic, partition, leader_epoch }
            | CheckpointCall::Save { group_id, topic, partition, leader_epoch, .. } => {
                (group_id, Some((topic, *partition, *leader_epoch)))
            }
            CheckpointCall::Delete { group_id } => (group_id, None),
        };
        if !group_id.starts_with(crate::transforms::CHECKPOINT_GROUP_PREFIX) {
            let message = format!("group {group_id:?} holds no transform checkpoints");
            return Err(ApiError::new(ErrorCode::InvalidGroupId, message));
        }
        if let Some((topic, partition, sent)) = input {
            let known =
                self.controller.read(|image| image.partition(topic, partition).ok().map(|state| state.leader_epoch));
            if known.is_none_or(|known| sent > known) {
                let message = format!("{topic}-{partition}: leader epoch {sent} is not known here yet");
                return Err(ApiError::new(ErrorCode::NotLeaderOrFollower, message));
            }
        }
        match call {
            CheckpointCall::Load { group_id, topic, partition, leader_epoch } => {
                let partition = GroupPartition { topic, partition };
                let claimed = self.groups().claim_offset(&group_id, partition, leader_epoch).await?;
                // An empty claim (no checkpoint yet) reads as none.
                Ok(claimed.filter(|value| !value.metadata.is_empty()).map(|value| (value.offset, value.metadata)))
            }
            CheckpointCall::Save { group_id, topic, partition, offset, metadata, leader_epoch } => {
                let request = CommitRequest {
                    group_id,
                    member_id: String::new(),
                    member_epoch: -1,
                    offsets: vec![(GroupPartition { topic, partition }, offset, metadata)],
                    leader_epoch: Some(leader_epoch),
                };
                self.groups().commit(&request).await.map(|()| None)
            }
            CheckpointCall::Delete { group_id } => {
                let deployed = self.controller.read(|image| {
                    image
                        .transforms
                        .values()
                        .any(|transform| crate::transforms::checkpoint_group(&transform.entry) == group_id)
                });
                if deployed {
                    let message = format!("group {group_id:?} holds the checkpoints of a deployed transform");
                    return Err(ApiError::new(ErrorCode::InvalidGroupId, message));
                }
                self.delete_checkpoint_group(&group_id).await
            }
        }
    }

    async fn delete_checkpoint_group(&self, group_id: &str) -> Result<Option<(i64, String)>, ApiError> {
        match self.groups().delete_group(group_id).await {
            Err(error) if error.code == ErrorCode::GroupIdNotFound => Ok(None),
            done => done.map(|()| None),
        }
    }

    /// Answers a [`CheckpointCall`] another broker's transform task forwarded.
    pub(super) async fn checkpoint_forwarded(&self, payload: &[u8]) -> Vec<u8> {
        let answer: CheckpointAnswer = match serde_json::from_slice::<CheckpointCall>(payload) {
            Ok(call) => self.answer_checkpoint(call).await.map_err(|error| to_peer_error(&error)),
            Err(error) => Err((ErrorCode::InvalidRequest as u16, format!("a malformed checkpoint call: {error}"))),
        };
        serde_json::to_vec(&answer).unwrap_or_default()
    }
}

/// A produce another broker's transform forwards to this one (the leader):
/// `[u32 LE header length][header JSON][batches]`.
#[derive(serde::Serialize, serde::Deserialize)]
struct ForwardedProduce {
    topic: String,
    partition: i32,
    acks: i16,
    timeout_ms: u32,
}

/// Longest a forwarded produce may wait at the leader: under the links' 5 s per call.
const FORWARDED_TIMEOUT_MS: u32 = 4_000;

fn encode_forwarded_produce(request: &ProduceRequest) -> Vec<u8> {
    let acks = match request.acks {
        Acks::None => 0,
        Acks::Leader => 1,
        Acks::All => -1,
    };
    // The leader answers before the link gives up on the call.
    let timeout_ms = request.timeout_ms.min(FORWARDED_TIMEOUT_MS);
    let header = ForwardedProduce { topic: request.topic.clone(), partition: request.partition, acks, timeout_ms };
    frame(&header, &request.batches)
}

/// The answer to a forwarded produce: `Ok(Produced)` or `Err((code, message))`, as JSON.
type ForwardedAnswer = Result<(i64, i64), PeerError>;

fn decode_forwarded_answer(bytes: &[u8]) -> Result<Produced, ApiError> {
    let answer: ForwardedAnswer = serde_json::from_slice(bytes).map_err(|error| {
        ApiError::new(ErrorCode::UnknownServerError, format!("a forwarded produce's answer: {error}"))
    })?;
    match answer {
        Ok((base_offset, log_start_offset)) => Ok(Produced { base_offset, log_start_offset }),
        Err(error) => Err(from_peer_error(error)),
    }
}

impl Node {
    /// Carries out a produce forwarded by another broker's transform task
    /// (`controllerCall` kind `produce`); the answer is encoded for it.
    pub async fn produce_forwarded(&self, payload: &[u8]) -> Vec<u8> {
        let answer: ForwardedAnswer = match decode_forwarded_produce(payload) {
            Ok(request) => match self.produce(request).await {
                Ok(produced) => Ok((produced.base_offset, produced.log_start_offset)),
                Err(error) => Err(to_peer_error(&error)),
            },
            Err(message) => Err((ErrorCode::InvalidRequest as u16, message)),
        };
        serde_json::to_vec(&answer).unwrap_or_default()
    }
}

fn decode_forwarded_produce(payload: &[u8]) -> Result<ProduceRequest, String> {
    let (header, batches) = unframe::<ForwardedProduce>(payload).ok_or("a malformed forwarded produce")?;
    let acks = match header.acks {
        0 => Acks::None,
        1 => Acks::Leader,
        -1 => Acks::All,
        other => return Err(format!("acks {other}")),
    };
    Ok(ProduceRequest {
        topic: header.topic,
        partition: header.partition,
        acks,
        timeout_ms: header.timeout_ms,
        batches: batches.to_vec(),
    })
}

/// Runs blocking plugin work (compiling, instantiating, file IO) off the
/// runtime's workers.
pub(super) async fn blocking<T: Send + 'static, E: Into<ApiError> + Send + 'static>(
    work: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, ApiError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(done) => done.map_err(Into::into),
        Err(error) => Err(ApiError::new(ErrorCode::UnknownServerError, format!("plugin task failed: {error}"))),
    }
}
