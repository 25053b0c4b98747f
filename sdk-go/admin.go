package weir

/*
#include "weir.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"sync"
)

// Admin manages topics, configs, groups, plugins and transforms. Get it from
// Client.Admin; it closes with its client.
type Admin struct {
	client *Client
	mu     sync.RWMutex
	handle *C.WeirAdmin
}

func newAdmin(c *Client) (*Admin, error) {
	settings, err := c.settings(nil, nil, nil)
	if err != nil {
		return nil, err
	}
	ptr, n := cBytes(settings)
	var handle *C.WeirAdmin
	if err := takeError(C.weir_admin_new(ptr, n, &handle)); err != nil {
		return nil, err
	}
	return &Admin{client: c, handle: handle}, nil
}

func (a *Admin) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.handle != nil {
		C.weir_admin_free(a.handle)
		a.handle = nil
	}
}

// do runs one admin request and decodes its JSON answer into answer (nil:
// ignore it).
func (a *Admin) do(ctx context.Context, request map[string]any, answer any) error {
	body, err := json.Marshal(request)
	if err != nil {
		return &Error{Code: CodeInvalidRequest, Message: err.Error()}
	}
	return a.run(ctx, answer, func(handle *C.WeirAdmin, queue *C.WeirQueue, token C.uint64_t) *C.WeirError {
		ptr, n := cBytes(body)
		return C.weir_admin_call(handle, queue, token, ptr, n)
	})
}

func (a *Admin) run(ctx context.Context, answer any, begin func(*C.WeirAdmin, *C.WeirQueue, C.uint64_t) *C.WeirError) error {
	a.mu.RLock()
	handle := a.handle
	if handle == nil {
		a.mu.RUnlock()
		return ErrClosed
	}
	done, err := a.client.engine.call(ctx, func(queue *C.WeirQueue, token C.uint64_t) *C.WeirError {
		return begin(handle, queue, token)
	})
	a.mu.RUnlock()
	if err != nil || answer == nil {
		return err
	}
	if err := json.Unmarshal(done.data, answer); err != nil {
		return errMalformed
	}
	return nil
}

// NewTopic describes a topic to create.
type NewTopic struct {
	Name       string
	Partitions int32
	// ReplicationFactor 0 takes the broker's default.
	ReplicationFactor int16
	// Configs are topic settings ("retention.ms", "flush.policy", …).
	Configs map[string]string
}

// CreateTopics creates each topic, stopping at the first failure.
func (a *Admin) CreateTopics(ctx context.Context, topics ...NewTopic) error {
	for _, t := range topics {
		rf := int(t.ReplicationFactor)
		if rf == 0 {
			rf = -1
		}
		request := map[string]any{"op": "createTopic", "name": t.Name, "partitions": t.Partitions, "replicationFactor": rf}
		if t.Configs != nil {
			request["configs"] = t.Configs
		}
		if err := a.do(ctx, request, nil); err != nil {
			return err
		}
	}
	return nil
}

// DeleteTopics deletes each topic, stopping at the first failure.
func (a *Admin) DeleteTopics(ctx context.Context, names ...string) error {
	for _, name := range names {
		if err := a.do(ctx, map[string]any{"op": "deleteTopic", "name": name}, nil); err != nil {
			return err
		}
	}
	return nil
}

// ListTopics names every topic.
func (a *Admin) ListTopics(ctx context.Context) ([]string, error) {
	var names []string
	err := a.do(ctx, map[string]any{"op": "listTopics"}, &names)
	return names, err
}

// PartitionDescription is one partition of a topic.
type PartitionDescription struct {
	Partition   int32   `json:"partition"`
	Leader      int32   `json:"leader"`
	LeaderEpoch int32   `json:"leaderEpoch"`
	Replicas    []int32 `json:"replicas"`
	ISR         []int32 `json:"isr"`
	// TargetReplicas is set while a reassignment moves the partition.
	TargetReplicas []int32 `json:"targetReplicas"`
}

// TopicDescription is a topic's partitions and settings.
type TopicDescription struct {
	Name       string                 `json:"name"`
	Partitions []PartitionDescription `json:"partitions"`
	Configs    map[string]string      `json:"configs"`
}

// DescribeTopic is a topic's partitions and settings.
func (a *Admin) DescribeTopic(ctx context.Context, name string) (TopicDescription, error) {
	var d TopicDescription
	err := a.do(ctx, map[string]any{"op": "describeTopic", "name": name}, &d)
	return d, err
}

// AlterTopicConfig sets topic settings.
func (a *Admin) AlterTopicConfig(ctx context.Context, name string, configs map[string]string) error {
	return a.do(ctx, map[string]any{"op": "alterTopicConfig", "name": name, "configs": configs}, nil)
}

// Watermarks are a partition's log start offset and high watermark.
func (a *Admin) Watermarks(ctx context.Context, tp TopicPartition) (low, high int64, err error) {
	var w struct {
		Low  int64 `json:"low"`
		High int64 `json:"high"`
	}
	err = a.do(ctx, map[string]any{"op": "watermarks", "topic": tp.Topic, "partition": tp.Partition}, &w)
	return w.Low, w.High, err
}

// GroupListing is one consumer group.
type GroupListing struct {
	GroupID string `json:"groupId"`
	State   string `json:"state"`
	Members int    `json:"members"`
}

// ListGroups lists the consumer groups.
func (a *Admin) ListGroups(ctx context.Context) ([]GroupListing, error) {
	var groups []GroupListing
	err := a.do(ctx, map[string]any{"op": "listGroups"}, &groups)
	return groups, err
}

// GroupMember is one member of a group.
type GroupMember struct {
	MemberID         string           `json:"memberId"`
	InstanceID       *string          `json:"instanceId"`
	MemberEpoch      int32            `json:"memberEpoch"`
	SubscribedTopics []string         `json:"subscribedTopics"`
	Assigned         []TopicPartition `json:"assigned"`
}

// CommittedOffset is a group's committed offset of a partition.
type CommittedOffset struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Metadata  string `json:"metadata"`
}

// GroupDescription is a group's members and committed offsets.
type GroupDescription struct {
	GroupID    string            `json:"groupId"`
	State      string            `json:"state"`
	GroupEpoch int32             `json:"groupEpoch"`
	Assignor   string            `json:"assignor"`
	Members    []GroupMember     `json:"members"`
	Offsets    []CommittedOffset `json:"offsets"`
}

// DescribeGroup is a group's members and committed offsets.
func (a *Admin) DescribeGroup(ctx context.Context, groupID string) (GroupDescription, error) {
	var d GroupDescription
	err := a.do(ctx, map[string]any{"op": "describeGroup", "groupId": groupID}, &d)
	return d, err
}

// PartitionLag is how far a group is behind on one partition.
type PartitionLag struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Committed is nil when the group has committed nothing there.
	Committed    *int64 `json:"committed"`
	LogEndOffset int64  `json:"logEndOffset"`
	Lag          *int64 `json:"lag"`
	// Owner is the member that owns the partition, if any.
	Owner *string `json:"owner"`
}

// GroupLag is the group's lag on every partition it has offsets for or owns.
func (a *Admin) GroupLag(ctx context.Context, groupID string) ([]PartitionLag, error) {
	var lags []PartitionLag
	err := a.do(ctx, map[string]any{"op": "groupLag", "groupId": groupID}, &lags)
	return lags, err
}

// ResetOffsets sets a group's committed offsets (the group must have no
// members).
func (a *Admin) ResetOffsets(ctx context.Context, groupID string, offsets ...TopicPartitionOffset) error {
	entries := make([][3]any, len(offsets))
	for i, o := range offsets {
		entries[i] = [3]any{o.Topic, o.Partition, o.Offset}
	}
	return a.do(ctx, map[string]any{"op": "resetOffsets", "groupId": groupID, "offsets": entries}, nil)
}

// DeleteGroup deletes a group without members, and its offsets.
func (a *Admin) DeleteGroup(ctx context.Context, groupID string) error {
	return a.do(ctx, map[string]any{"op": "deleteGroup", "groupId": groupID}, nil)
}

// Plugin is a stored WebAssembly plugin and its counters.
type Plugin struct {
	Name string `json:"name"`
	// Hook is "partitioner", "produce-interceptor", "consume-interceptor" or
	// "transform".
	Hook       string   `json:"hook"`
	Digest     string   `json:"digest"`
	SizeBytes  uint64   `json:"sizeBytes"`
	UploadedMs int64    `json:"uploadedMs"`
	Calls      uint64   `json:"calls"`
	Errors     uint64   `json:"errors"`
	Traps      uint64   `json:"traps"`
	AttachedTo []string `json:"attachedTo"`
	// State is "ready", "compiling" (an upload answers before the broker
	// compiles), "failed" (see StateReason) or "fetching".
	State string `json:"state"`
	// StateReason says why the code failed to compile; empty otherwise.
	StateReason string `json:"stateReason"`
}

// UploadPlugin stores a WebAssembly component as plugin name for hook. The
// broker compiles it in the background: the answer's State may be
// "compiling" (ListPlugins shows when it is "ready" or "failed"); attaching or
// deploying the plugin waits for the compile.
func (a *Admin) UploadPlugin(ctx context.Context, name, hook string, wasm []byte) (Plugin, error) {
	var p Plugin
	err := a.run(ctx, &p, func(handle *C.WeirAdmin, queue *C.WeirQueue, token C.uint64_t) *C.WeirError {
		namePtr, nameLen := cString(name)
		hookPtr, hookLen := cString(hook)
		wasmPtr, wasmLen := cBytes(wasm)
		return C.weir_admin_upload_plugin(handle, queue, token, namePtr, nameLen, hookPtr, hookLen, wasmPtr, wasmLen)
	})
	return p, err
}

// ListPlugins lists the stored plugins.
func (a *Admin) ListPlugins(ctx context.Context) ([]Plugin, error) {
	var plugins []Plugin
	err := a.do(ctx, map[string]any{"op": "listPlugins"}, &plugins)
	return plugins, err
}

// DeletePlugin deletes a plugin attached nowhere.
func (a *Admin) DeletePlugin(ctx context.Context, name string) error {
	return a.do(ctx, map[string]any{"op": "deletePlugin", "name": name}, nil)
}

// PluginLogLine is one line a plugin logged.
type PluginLogLine struct {
	UnixMs  int64  `json:"unixMs"`
	Level   string `json:"level"`
	Message string `json:"message"`
}

// PluginLogs is a plugin's recent log lines.
func (a *Admin) PluginLogs(ctx context.Context, name string) ([]PluginLogLine, error) {
	var lines []PluginLogLine
	err := a.do(ctx, map[string]any{"op": "pluginLogs", "name": name}, &lines)
	return lines, err
}

// Attachment attaches a plugin to a topic.
type Attachment struct {
	Topic string
	// Hook is "produce-interceptor", "consume-interceptor" or "partitioner".
	Hook   string
	Plugin string
	Config map[string]string
	// FailurePolicy is what a failed call does ("": the hook's default).
	FailurePolicy string
}

// AttachPlugin attaches a plugin to a topic.
func (a *Admin) AttachPlugin(ctx context.Context, at Attachment) error {
	request := map[string]any{"op": "attachPlugin", "topic": at.Topic, "hook": at.Hook, "plugin": at.Plugin, "failurePolicy": at.FailurePolicy}
	if at.Config != nil {
		request["config"] = at.Config
	}
	return a.do(ctx, request, nil)
}

// DetachPlugin detaches a plugin from a topic's hook.
func (a *Admin) DetachPlugin(ctx context.Context, topic, hook, plugin string) error {
	return a.do(ctx, map[string]any{"op": "detachPlugin", "topic": topic, "hook": hook, "plugin": plugin}, nil)
}

// SetPartitioner makes a partitioner plugin place the topic's keyed records
// (in every client that produces to it).
func (a *Admin) SetPartitioner(ctx context.Context, topic, plugin string, config map[string]string) error {
	return a.AttachPlugin(ctx, Attachment{Topic: topic, Hook: "partitioner", Plugin: plugin, Config: config})
}

// Where a transform starts or replays from, besides an offset.
const (
	TransformEarliest int64 = -2
	TransformLatest   int64 = -1
)

// Transform deploys a transform plugin from an input topic to outputs.
type Transform struct {
	Name         string
	Plugin       string
	InputTopic   string
	OutputTopics []string
	// Start is TransformEarliest, TransformLatest or an offset.
	Start  int64
	Config map[string]string
	// DeadLetterTopic, when set, takes the records the plugin fails on for
	// good (unchanged, with weir.dlq.* headers); otherwise such a record holds
	// its partition.
	DeadLetterTopic string
}

// DeployTransform deploys a transform.
func (a *Admin) DeployTransform(ctx context.Context, t Transform) error {
	request := map[string]any{"op": "deployTransform", "name": t.Name, "plugin": t.Plugin, "inputTopic": t.InputTopic, "outputTopics": t.OutputTopics, "start": t.Start}
	if t.Config != nil {
		request["config"] = t.Config
	}
	if t.DeadLetterTopic != "" {
		request["deadLetterTopic"] = t.DeadLetterTopic
	}
	return a.do(ctx, request, nil)
}

// TransformPartition is one input partition of a transform.
type TransformPartition struct {
	Partition  int32 `json:"partition"`
	NextOffset int64 `json:"nextOffset"`
	// Lag is -1 when unknown.
	Lag       int64  `json:"lag"`
	Processed uint64 `json:"processed"`
	Emitted   uint64 `json:"emitted"`
	// DeadLettered counts records sent to the dead-letter topic.
	DeadLettered uint64 `json:"deadLettered"`
}

// TransformStatus is a deployed transform and its progress.
type TransformStatus struct {
	Name         string   `json:"name"`
	Plugin       string   `json:"plugin"`
	InputTopic   string   `json:"inputTopic"`
	OutputTopics []string `json:"outputTopics"`
	// DeadLetterTopic is empty when the transform has none.
	DeadLetterTopic string `json:"deadLetterTopic"`
	// State is "running", "paused", "starting" or "retrying: <why>".
	State      string               `json:"state"`
	Partitions []TransformPartition `json:"partitions"`
}

// ListTransforms lists the deployed transforms.
func (a *Admin) ListTransforms(ctx context.Context) ([]TransformStatus, error) {
	var transforms []TransformStatus
	err := a.do(ctx, map[string]any{"op": "listTransforms"}, &transforms)
	return transforms, err
}

func (a *Admin) controlTransform(ctx context.Context, name, action string, offset int64) error {
	return a.do(ctx, map[string]any{"op": "controlTransform", "name": name, "action": action, "offset": offset}, nil)
}

// PauseTransform pauses a transform.
func (a *Admin) PauseTransform(ctx context.Context, name string) error {
	return a.controlTransform(ctx, name, "pause", TransformEarliest)
}

// ResumeTransform resumes a paused transform.
func (a *Admin) ResumeTransform(ctx context.Context, name string) error {
	return a.controlTransform(ctx, name, "resume", TransformEarliest)
}

// ReplayTransform runs a transform again from: TransformEarliest,
// TransformLatest or an offset.
func (a *Admin) ReplayTransform(ctx context.Context, name string, from int64) error {
	return a.controlTransform(ctx, name, "replay", from)
}

// DeleteTransform deletes a transform.
func (a *Admin) DeleteTransform(ctx context.Context, name string) error {
	return a.controlTransform(ctx, name, "delete", TransformEarliest)
}
