# Weir's client RPC contract (Cap'n Proto). This file is the public API.
#
# Rules: ordinals (@N) are never reused or renumbered; fields and methods are only
# ever added. Errors are a code from the ErrorCode table (abi/src/error_code.rs)
# plus a human-readable message. Record batches travel as Kafka RecordBatch v2
# bytes, exactly as stored.

@0x8be2623334f78c34;

struct Error {
  code @0 :UInt16;       # ErrorCode number; 0 never appears (absence of error is a null pointer)
  message @1 :Text;
}

struct ConfigEntry {
  key @0 :Text;          # Kafka-style names: retention.ms, segment.bytes, flush.policy, ...
  value @1 :Text;
}

# ---- metadata ----

struct BrokerInfo {
  id @0 :Int32;
  host @1 :Text;
  port @2 :UInt16;
}

struct PartitionMetadata {
  partition @0 :Int32;
  leader @1 :Int32;          # broker id; -1 when none
  leaderEpoch @2 :Int32;
  replicas @3 :List(Int32);
  isr @4 :List(Int32);
  error @5 :Error;           # e.g. StorageError for an offline partition
  # While a reassignment runs: the replicas it moves the partition to (the
  # replicas then list them first, then those being removed); empty otherwise.
  targetReplicas @6 :List(Int32);
}

# One partition's new replicas, for `reassignPartitions`.
struct PartitionAssignment {
  partition @0 :UInt32;
  replicas @1 :List(Int32);     # in preference order: the first is the preferred leader
}

struct TopicMetadata {
  name @0 :Text;
  partitions @1 :List(PartitionMetadata);
  error @2 :Error;           # UnknownTopicOrPartition when asked for a missing topic
  partitioner @3 :PartitionerRef;   # null: Kafka's key partitioning
}

# A partitioner plugin set on a topic: clients fetch the module by digest
# (Admin.fetchPlugin) and run it for records without an explicit partition.
struct PartitionerRef {
  plugin @0 :Text;
  digest @1 :Text;
  config @2 :List(ConfigEntry);
}

struct Metadata {
  brokers @0 :List(BrokerInfo);
  controllerId @1 :Int32;
  topics @2 :List(TopicMetadata);
}

# ---- admin ----

struct TopicSpec {
  name @0 :Text;
  partitionCount @1 :Int32;
  replicationFactor @2 :Int16;
  configs @3 :List(ConfigEntry);
}

struct TopicDescription {
  name @0 :Text;
  partitions @1 :List(PartitionMetadata);
  configs @2 :List(ConfigEntry);   # effective configs
}

interface Admin {
  createTopic @0 (spec :TopicSpec) -> (error :Error);
  deleteTopic @1 (name :Text) -> (error :Error);
  listTopics @2 () -> (names :List(Text));
  describeTopic @3 (name :Text) -> (description :TopicDescription, error :Error);
  alterTopicConfig @4 (name :Text, configs :List(ConfigEntry)) -> (error :Error);
  listGroups @5 () -> (groups :List(GroupListing));
  describeGroup @6 (groupId :Text) -> (description :GroupDescription, error :Error);
  deleteGroup @7 (groupId :Text) -> (error :Error);
  resetOffsets @8 (groupId :Text, offsets :List(OffsetCommitEntry)) -> (error :Error);   # group must be empty

  # Plugins (WebAssembly components of wit/weir-plugin.wit). An upload is
  # validated (it compiles and exports the hook it claims; empty hook = any) and
  # stored by content; uploading an existing name replaces its code.
  uploadPlugin @9 (name :Text, hook :Text, wasm :Data) -> (plugin :PluginSummary, error :Error);
  listPlugins @10 () -> (plugins :List(PluginSummary));
  deletePlugin @11 (name :Text) -> (error :Error);       # refused while attached
  pluginLogs @12 (name :Text) -> (entries :List(PluginLogEntry), error :Error);
  # Attaches a plugin to a topic (hook: produce-interceptor, consume-interceptor,
  # or partitioner — one per topic, replacing the previous one); init(config)
  # runs first and may refuse. Interceptors of a topic run in attach order.
  # failurePolicy: fail-closed (default) or fail-open.
  attachPlugin @13 (topic :Text, hook :Text, plugin :Text, config :List(ConfigEntry), failurePolicy :Text) -> (error :Error);
  detachPlugin @14 (topic :Text, hook :Text, plugin :Text) -> (error :Error);
  listAttachments @15 (topic :Text) -> (attachments :List(PluginAttachment), error :Error);   # empty topic = all

  # Transforms: a transform plugin run over every committed record of an input
  # topic (by the leader of each input partition), producing to up to 8 output
  # topics through the idempotent path (sequence numbers checkpointed with the
  # input offset: no duplicate outputs after a restart). Output partitions come
  # from the output topic's partitioner (its plugin, else Kafka murmur2 of the
  # key), so records can be re-keyed. Deployments are cluster-wide.
  deployTransform @16 (spec :TransformSpec) -> (error :Error);
  listTransforms @17 () -> (transforms :List(TransformStatus));
  # action: pause, resume, delete, or replay (from `offset`: -2 earliest, -1 latest,
  # else an offset of every input partition).
  controlTransform @18 (name :Text, action :Text, offset :Int64) -> (error :Error);
  # The bytes of an uploaded plugin, by digest (clients run partitioners).
  fetchPlugin @19 (digest :Text) -> (wasm :Data, error :Error);
  # The cluster as the answering broker sees it: brokers with their epoch and
  # state, the active controller, the voters, metadata offsets.
  describeCluster @20 () -> (cluster :ClusterDescription);
  # Moves the leadership of every partition whose preferred replica (the first)
  # is active and in the ISR but does not lead back to it; answers how many moved.
  electPreferredLeaders @21 () -> (moved :UInt32, error :Error);
  # Starts moving partitions of `topic` to new replicas (Kafka's partition
  # reassignment): the new replicas copy the leader's log, join the ISR, and
  # then the replicas not in the target are dropped (and leadership moves to
  # the target if its leader is dropped). Answers once the change is in the
  # cluster metadata; progress shows in each partition's `targetReplicas`.
  reassignPartitions @22 (topic :Text, assignments :List(PartitionAssignment)) -> (error :Error);

  # Plugin uploads in chunks, for components bigger than one request (clients
  # upload every plugin this way; uploadPlugin stays for small ones).
  # beginPluginUpload announces the component's size and SHA-256 (lowercase hex)
  # and answers an upload id and the largest chunk the broker takes -- or
  # `existing`, with uploadId 0, when the plugin `name` already has exactly
  # these bytes (uploads are idempotent: nothing to send). Refusals name the
  # limit and its setting ([plugins] upload_bytes_max).
  beginPluginUpload @23 (name :Text, hook :Text, sizeBytes :UInt64, digest :Text)
      -> (uploadId :UInt64, chunkBytesMax :UInt32, existing :PluginSummary, error :Error);
  # Appends `data` at `offset`: chunks come in order, each where the last ended.
  uploadPluginChunk @24 (uploadId :UInt64, offset :UInt64, data :Data) -> (error :Error);
  # Checks size and digest, then does what uploadPlugin does. An upload with
  # no chunk for 60 s is forgotten.
  finishPluginUpload @25 (uploadId :UInt64) -> (plugin :PluginSummary, error :Error);
  # What the partitioner plugins a client runs did since its last report: the
  # broker adds the counts to the plugin's client counters (PluginSummary
  # clientCalls, clientErrors) and the log lines to the plugin's log, prefixed
  # with `source`. Reports for code a plugin no longer runs are ignored.
  reportPluginCalls @26 (reports :List(PluginCallReport)) -> ();
}

struct PluginCallReport {
  plugin @0 :Text;
  digest @1 :Text;
  source @2 :Text;           # who ran it, e.g. "pid 4242 on host-a"
  calls @3 :UInt64;
  errors @4 :UInt64;
  busyNanos @5 :UInt64;
  log @6 :List(PluginLogEntry);
}

struct ClusterDescription {
  clusterId @0 :Text;
  activeController @1 :Int32;    # -1: none known
  voters @2 :List(Int32);
  brokers @3 :List(BrokerStatus);
  answeredBy @4 :Int32;          # the broker that answered
  metadataOffset @5 :Int64;      # the last metadata offset it applied (-1: none)
  partitionCount @6 :UInt32;     # partitions of every topic, internal ones included
  # "topic-partition" of each partition with fewer in-sync replicas than replicas,
  # with fewer than its min.insync.replicas (acks=all refused), and with no leader.
  underReplicated @7 :List(Text);
  underMinIsr @8 :List(Text);
  offline @9 :List(Text);
}

struct BrokerStatus {
  id @0 :Int32;
  host @1 :Text;
  port @2 :UInt16;
  epoch @3 :Int64;               # offset of its registration
  state @4 :Text;                # active, fenced
  rack @5 :Text;
  metadataOffset @6 :Int64;      # last metadata offset it reported (-1: not known here)
}

struct TransformSpec {
  name @0 :Text;
  plugin @1 :Text;               # an uploaded transform plugin
  inputTopic @2 :Text;
  outputTopics @3 :List(Text);   # 1 to 8; the plugin's topic-index picks one
  start @4 :Int64;               # -2 earliest, -1 latest (default), else an offset
  config @5 :List(ConfigEntry);
  # Where input records go that the plugin fails on for good (empty: none; a
  # failing record then holds its partition). Each is produced there exactly
  # once, as it was, with headers weir.dlq.error, weir.dlq.topic,
  # weir.dlq.partition and weir.dlq.offset, and the partition moves on.
  deadLetterTopic @6 :Text;
}

struct TransformStatus {
  name @0 :Text;
  plugin @1 :Text;
  inputTopic @2 :Text;
  outputTopics @3 :List(Text);
  state @4 :Text;                # running, paused, or failed: <why>
  partitions @5 :List(TransformPartition);
  deadLetterTopic @6 :Text;      # empty: none
}

struct TransformPartition {
  partition @0 :Int32;
  nextOffset @1 :Int64;          # the next input offset to process
  lag @2 :Int64;                 # input high watermark - nextOffset
  processed @3 :UInt64;          # input records since the deployment (kept with the checkpoint)
  emitted @4 :UInt64;            # output records since the deployment (kept with the checkpoint)
  deadLettered @5 :UInt64;       # input records sent to the dead-letter topic (likewise)
}

struct PluginSummary {
  name @0 :Text;
  hook @1 :Text;             # partitioner, produce-interceptor, consume-interceptor, transform
  digest @2 :Text;           # sha256 of the uploaded bytes, hex
  sizeBytes @3 :UInt64;
  uploadedMs @4 :Int64;
  calls @5 :UInt64;          # over every attachment, since the broker started
  errors @6 :UInt64;
  traps @7 :UInt64;
  busyNanos @8 :UInt64;
  attachedTo @9 :List(Text); # topics
  clientCalls @10 :UInt64;   # partitioner calls made by clients, as reported to this broker
  clientErrors @11 :UInt64;
  state @12 :Text;           # ready, compiling, failed (see stateReason), fetching; empty from older brokers
  stateReason @13 :Text;     # why the code failed to compile
}

struct PluginLogEntry {
  unixMs @0 :Int64;
  level @1 :Text;
  message @2 :Text;
}

struct PluginAttachment {
  topic @0 :Text;
  hook @1 :Text;
  plugin @2 :Text;
  config @3 :List(ConfigEntry);
  failurePolicy @4 :Text;
  status @5 :Text;           # "running", or why it is not
}

# ---- produce ----

enum Acks {
  none @0;               # acks=0: answered at once
  leader @1;             # acks=1: after the leader's append is durable as the topic's
                         # flush.policy defines it (always: fdatasync'ed; interval: in the page cache)
  all @2;                # acks=all: the same on every in-sync replica
}

struct ProduceRequest {
  topic @0 :Text;
  partition @1 :Int32;   # -1: the broker places each record (the topic's partitioner
                         # plugin, else Kafka murmur2 of the key, else one partition
                         # per request, round robin); not for idempotent batches
  acks @2 :Acks;
  timeoutMs @3 :UInt32;
  batches @4 :Data;      # one or more RecordBatch v2, back to back
}

struct ProduceResponse {
  baseOffset @0 :Int64;      # of the first record; -1 on error or acks=none
  logAppendTimeMs @1 :Int64; # -1 unless the topic uses LogAppendTime
  logStartOffset @2 :Int64;
  error @3 :Error;
  placed @4 :List(RecordPlacement);   # partition -1 requests: where each record went, in order
}

struct RecordPlacement {
  partition @0 :Int32;
  offset @1 :Int64;          # -1 with acks=none
}

# ---- produce to many partitions (one request per broker, as producers use it) ----

struct PartitionProduce {
  topic @0 :Text;
  partition @1 :Int32;   # as in ProduceRequest (-1: the broker places each record)
  batches @2 :Data;      # one or more RecordBatch v2, back to back
}

struct ProduceManyRequest {
  acks @0 :Acks;
  timeoutMs @1 :UInt32;
  partitions @2 :List(PartitionProduce);   # entries for one partition are appended in request order
}

# ---- fetch ----

struct FetchRequest {
  topic @0 :Text;
  partition @1 :Int32;
  offset @2 :Int64;
  maxBytes @3 :UInt32;       # at least one whole batch is returned even if larger
  minBytes @4 :UInt32;       # long poll: wait until this many bytes are available ...
  maxWaitMs @5 :UInt32;      # ... or this much time has passed
}

struct FetchResponse {
  batches @0 :Data;          # whole RecordBatch v2, exactly as stored
  highWatermark @1 :Int64;
  logStartOffset @2 :Int64;
  error @3 :Error;
}

# ---- fetch of many partitions (one request per broker, as consumers use it) ----

struct PartitionFetch {
  topic @0 :Text;
  partition @1 :Int32;
  offset @2 :Int64;
  maxBytes @3 :UInt32;       # per partition; at least one whole batch if the total allows
}

struct PartitionData {
  topic @0 :Text;
  partition @1 :Int32;
  batches @2 :Data;          # whole RecordBatch v2, exactly as stored
  highWatermark @3 :Int64;
  logStartOffset @4 :Int64;
  error @5 :Error;           # per partition; the others are still answered
}

struct FetchManyRequest {
  partitions @0 :List(PartitionFetch);
  minBytes @1 :UInt32;       # long poll: wait until this many bytes in total are available ...
  maxWaitMs @2 :UInt32;      # ... or this much time has passed (an error answers at once)
  maxBytes @3 :UInt32;       # total over all partitions (the broker caps it too)
  groupId @4 :Text;          # the consumer's group, for consume interceptors; empty = none
}

# ---- consumer groups (server-side assignment, KIP-848 style) ----

struct TopicPartition {
  topic @0 :Text;
  partition @1 :Int32;
}

struct GroupHeartbeatRequest {
  groupId @0 :Text;
  memberId @1 :Text;             # empty to join (the coordinator picks one)
  instanceId @2 :Text;           # group.instance.id (static membership); empty = none
  memberEpoch @3 :Int32;         # 0 = join, -1 = leave, else the last epoch received
  subscribedTopics @4 :List(Text);
  subscriptionChanged @5 :Bool;  # false: subscribedTopics is ignored (unchanged)
  assignor @6 :Text;             # for a new group; empty = the broker's default
  owned @7 :List(TopicPartition);
  ownedReported @8 :Bool;        # false: owned is ignored (unchanged)
  sessionTimeoutMs @9 :UInt32;   # 0 = the broker's default
}

struct GroupHeartbeatResponse {
  memberId @0 :Text;
  memberEpoch @1 :Int32;
  heartbeatIntervalMs @2 :UInt32;
  assignment @3 :List(TopicPartition);   # everything the member should own now
  error @4 :Error;
}

struct OffsetCommitEntry {
  topic @0 :Text;
  partition @1 :Int32;
  offset @2 :Int64;              # the next offset to read
  metadata @3 :Text;
}

struct CommittedOffset {
  topic @0 :Text;
  partition @1 :Int32;
  offset @2 :Int64;
  metadata @3 :Text;
  commitTimestampMs @4 :Int64;
}

struct GroupMemberDescription {
  memberId @0 :Text;
  instanceId @1 :Text;
  memberEpoch @2 :Int32;
  subscribedTopics @3 :List(Text);
  assigned @4 :List(TopicPartition);
  target @5 :List(TopicPartition);
}

struct GroupDescription {
  groupId @0 :Text;
  state @1 :Text;                # Empty, Reconciling, Stable
  groupEpoch @2 :Int32;
  assignor @3 :Text;
  members @4 :List(GroupMemberDescription);
  offsets @5 :List(CommittedOffset);
}

struct GroupListing {
  groupId @0 :Text;
  state @1 :Text;
  memberCount @2 :UInt32;
}

# ---- offsets and producers ----

struct OffsetQuery {
  union {
    earliest @0 :Void;
    latest @1 :Void;
    timestampMs @2 :Int64;   # first offset whose record timestamp is >= this
  }
}

struct ProducerId {
  producerId @0 :Int64;
  producerEpoch @1 :Int16;
}

# The bootstrap capability a client gets on connecting.
interface Broker {
  metadata @0 (topics :List(Text)) -> (metadata :Metadata);   # empty list = all topics
  admin @1 () -> (admin :Admin);
  produce @2 (request :ProduceRequest) -> (response :ProduceResponse);
  fetch @3 (request :FetchRequest) -> (response :FetchResponse);
  listOffset @4 (topic :Text, partition :Int32, query :OffsetQuery) -> (offset :Int64, timestampMs :Int64, error :Error);
  initProducerId @5 () -> (id :ProducerId, error :Error);
  fetchMany @6 (request :FetchManyRequest) -> (partitions :List(PartitionData));   # in request order
  groupHeartbeat @7 (request :GroupHeartbeatRequest) -> (response :GroupHeartbeatResponse);
  commitOffsets @8 (groupId :Text, memberId :Text, memberEpoch :Int32, offsets :List(OffsetCommitEntry)) -> (error :Error);
  fetchOffsets @9 (groupId :Text, partitions :List(TopicPartition)) -> (offsets :List(CommittedOffset), error :Error);   # empty list = all
  # Between brokers, not for clients: one call of the controller quorum (a Raft
  # message, a request for the active controller, a broker heartbeat); JSON both
  # ways (fetch-plugin answers raw bytes). `kind` names the call (append-entries,
  # vote, install-snapshot, controller-request, broker-heartbeat, add-learner,
  # fetch-plugin).
  controllerCall @10 (kind :Text, payload :Data) -> (payload :Data, error :Error);
  # The broker that coordinates a consumer group (the leader of the group's
  # partition of __consumer_offsets); send the group's calls there.
  findCoordinator @11 (groupId :Text) -> (coordinator :BrokerInfo, error :Error);
  # produce of several partitions in one call: each entry is answered as
  # `produce` answers it, in request order; one entry's error leaves the others.
  produceMany @12 (request :ProduceManyRequest) -> (responses :List(ProduceResponse));
}
