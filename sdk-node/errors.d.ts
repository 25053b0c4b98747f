/** A Weir client error: `code` is the ErrorCode number, `retriable` whether retrying may succeed. */
export declare class WeirError extends Error {
    /** The ErrorCode number (0: the binding layer itself cannot run). */
    readonly code: number;
    /** Whether retrying the same call may succeed. */
    readonly retriable: boolean;
    constructor(message: string, code: number, retriable: boolean);
}
/** ErrorCode 1, `UnknownServerError` (not retriable). */
export declare class UnknownServerError extends WeirError {
}
/** ErrorCode 2, `CorruptMessage` (not retriable). */
export declare class CorruptMessageError extends WeirError {
}
/** ErrorCode 3, `UnknownTopicOrPartition` (retriable). */
export declare class UnknownTopicOrPartitionError extends WeirError {
}
/** ErrorCode 4, `OffsetOutOfRange` (not retriable). */
export declare class OffsetOutOfRangeError extends WeirError {
}
/** ErrorCode 5, `MessageTooLarge` (not retriable). */
export declare class MessageTooLargeError extends WeirError {
}
/** ErrorCode 6, `NotLeaderOrFollower` (retriable). */
export declare class NotLeaderOrFollowerError extends WeirError {
}
/** ErrorCode 7, `RequestTimedOut` (retriable). */
export declare class RequestTimedOutError extends WeirError {
}
/** ErrorCode 8, `InvalidRequest` (not retriable). */
export declare class InvalidRequestError extends WeirError {
}
/** ErrorCode 9, `TopicAlreadyExists` (not retriable). */
export declare class TopicAlreadyExistsError extends WeirError {
}
/** ErrorCode 10, `InvalidPartitions` (not retriable). */
export declare class InvalidPartitionsError extends WeirError {
}
/** ErrorCode 11, `InvalidReplicationFactor` (not retriable). */
export declare class InvalidReplicationFactorError extends WeirError {
}
/** ErrorCode 12, `InvalidConfig` (not retriable). */
export declare class InvalidConfigError extends WeirError {
}
/** ErrorCode 13, `StorageError` (retriable). */
export declare class StorageError extends WeirError {
}
/** ErrorCode 14, `InvalidTopic` (not retriable). */
export declare class InvalidTopicError extends WeirError {
}
/** ErrorCode 15, `DuplicateSequence` (not retriable). */
export declare class DuplicateSequenceError extends WeirError {
}
/** ErrorCode 16, `OutOfOrderSequence` (not retriable). */
export declare class OutOfOrderSequenceError extends WeirError {
}
/** ErrorCode 17, `UnknownProducerId` (retriable). */
export declare class UnknownProducerIdError extends WeirError {
}
/** ErrorCode 18, `InvalidProducerEpoch` (not retriable). */
export declare class InvalidProducerEpochError extends WeirError {
}
/** ErrorCode 19, `NotEnoughReplicas` (retriable). */
export declare class NotEnoughReplicasError extends WeirError {
}
/** ErrorCode 20, `ResourceExhausted` (retriable). */
export declare class ResourceExhaustedError extends WeirError {
}
/** ErrorCode 21, `UnsupportedCompression` (not retriable). */
export declare class UnsupportedCompressionError extends WeirError {
}
/** ErrorCode 22, `UnknownMemberId` (not retriable). */
export declare class UnknownMemberIdError extends WeirError {
}
/** ErrorCode 23, `FencedMemberEpoch` (not retriable). */
export declare class FencedMemberEpochError extends WeirError {
}
/** ErrorCode 24, `StaleMemberEpoch` (not retriable). */
export declare class StaleMemberEpochError extends WeirError {
}
/** ErrorCode 25, `GroupIdNotFound` (not retriable). */
export declare class GroupIdNotFoundError extends WeirError {
}
/** ErrorCode 26, `NonEmptyGroup` (not retriable). */
export declare class NonEmptyGroupError extends WeirError {
}
/** ErrorCode 27, `InvalidGroupId` (not retriable). */
export declare class InvalidGroupIdError extends WeirError {
}
/** ErrorCode 28, `UnreleasedInstanceId` (not retriable). */
export declare class UnreleasedInstanceIdError extends WeirError {
}
/** ErrorCode 29, `InvalidRecord` (not retriable). */
export declare class InvalidRecordError extends WeirError {
}
/** ErrorCode 30, `PluginFailed` (not retriable). */
export declare class PluginFailedError extends WeirError {
}
/** ErrorCode 31, `InvalidPlugin` (not retriable). */
export declare class InvalidPluginError extends WeirError {
}
/** ErrorCode 32, `PluginNotFound` (not retriable). */
export declare class PluginNotFoundError extends WeirError {
}
/** ErrorCode 33, `PluginInUse` (not retriable). */
export declare class PluginInUseError extends WeirError {
}
/** ErrorCode 34, `NetworkError` (retriable). */
export declare class NetworkError extends WeirError {
}
/** ErrorCode 35, `NotCoordinator` (retriable). */
export declare class NotCoordinatorError extends WeirError {
}
/** ErrorCode 36, `FencedLeaderEpoch` (not retriable). */
export declare class FencedLeaderEpochError extends WeirError {
}
/** ErrorCode number → [class, retriable]. */
export declare const ERROR_CLASSES: ReadonlyMap<number, [typeof WeirError, boolean]>;
