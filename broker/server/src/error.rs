//! [`ApiError`]: what a client is told when a request fails — one code from the
//! stable `ErrorCode` table in `abi` plus a human-readable message.
//!
//! Every internal error converts here exactly once, at the edge of [`crate::node`];
//! the RPC layer only copies code and message into the response.

use abi::ErrorCode;
use broker_core::log::LogError;
use broker_core::producer_state::SequenceError;

use crate::log_dir::CreatePartitionError;

/// A failed request: a stable code and a message for humans.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError { code, message: message.into() }
    }

    pub fn unknown_topic(topic: &str) -> ApiError {
        ApiError::new(ErrorCode::UnknownTopicOrPartition, format!("topic {topic:?} does not exist"))
    }

    pub fn unknown_partition(topic: &str, partition: i32, partition_count: usize) -> ApiError {
        ApiError::new(
            ErrorCode::UnknownTopicOrPartition,
            format!("topic {topic:?} has no partition {partition} (it has {partition_count})"),
        )
    }
}

impl From<LogError> for ApiError {
    fn from(error: LogError) -> ApiError {
        let code = match &error {
            LogError::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
            LogError::InvalidBatch { .. } => ErrorCode::CorruptMessage,
            LogError::BatchTooLarge { .. } | LogError::AppendTooLarge { .. } => ErrorCode::MessageTooLarge,
            LogError::EmptyAppend | LogError::NotContiguous { .. } => ErrorCode::InvalidRequest,
            LogError::LeaderEpochBackwards { .. } => ErrorCode::NotLeaderOrFollower,
            LogError::Config(_) => ErrorCode::InvalidConfig,
            // A partition closed under a request: its topic was deleted meanwhile.
            LogError::Closed { .. } => ErrorCode::UnknownTopicOrPartition,
            LogError::Io { .. } | LogError::Corrupt { .. } | LogError::Fenced { .. } => ErrorCode::StorageError,
        };
        ApiError::new(code, error.to_string())
    }
}

impl From<crate::partition::ReplicaError> for ApiError {
    fn from(error: crate::partition::ReplicaError) -> ApiError {
        use crate::partition::ReplicaError;
        match error {
            ReplicaError::Log(error) => error.into(),
            ReplicaError::Role(message) => ApiError::new(ErrorCode::NotLeaderOrFollower, message),
            ReplicaError::NotEnoughReplicas(message) => ApiError::new(ErrorCode::NotEnoughReplicas, message),
        }
    }
}

impl From<SequenceError> for ApiError {
    fn from(error: SequenceError) -> ApiError {
        let code = match error {
            SequenceError::InvalidProducerEpoch { .. } => ErrorCode::InvalidProducerEpoch,
            SequenceError::OutOfOrderSequence { .. } => ErrorCode::OutOfOrderSequence,
            SequenceError::DuplicateSequence { .. } => ErrorCode::DuplicateSequence,
        };
        ApiError::new(code, error.to_string())
    }
}

impl From<CreatePartitionError> for ApiError {
    fn from(error: CreatePartitionError) -> ApiError {
        match error {
            CreatePartitionError::InvalidTopicName { .. } => ApiError::new(ErrorCode::InvalidTopic, error.to_string()),
            CreatePartitionError::Log(error) => error.into(),
        }
    }
}
