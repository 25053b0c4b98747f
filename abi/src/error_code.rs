//! [`ErrorCode`]: the one table of wire error codes.
//!
//! Every error the broker sends carries one of these numbers; every SDK maps them to
//! its native errors from this table alone. Numbers are stable forever: a code is
//! never renumbered, reused or removed (a retired code stays, marked retired). New
//! codes take the next free number. The table is checked by a snapshot test.

use std::fmt;

macro_rules! error_codes {
    ($($(#[doc = $doc:literal])* $name:ident = $number:literal, retriable: $retriable:literal;)*) => {
        /// A wire error code; see the module docs.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum ErrorCode {
            $($(#[doc = $doc])* $name = $number,)*
        }

        impl ErrorCode {
            /// Every code, in number order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$name,)*];

            /// The code with this number, if it exists.
            pub fn from_u16(number: u16) -> Option<ErrorCode> {
                match number {
                    $($number => Some(ErrorCode::$name),)*
                    _ => None,
                }
            }

            /// The stable name (`UnknownTopicOrPartition`), used by SDKs for class names.
            pub fn name(self) -> &'static str {
                match self {
                    $(ErrorCode::$name => stringify!($name),)*
                }
            }

            /// Whether the same request may succeed if retried unchanged.
            pub fn is_retriable(self) -> bool {
                match self {
                    $(ErrorCode::$name => $retriable,)*
                }
            }
        }
    };
}

error_codes! {
    /// A failure the broker did not classify; look at the message.
    UnknownServerError = 1, retriable: false;
    /// A batch failed validation (CRC, length, magic, record count).
    CorruptMessage = 2, retriable: false;
    /// The topic or partition does not exist (on this broker).
    UnknownTopicOrPartition = 3, retriable: true;
    /// The requested offset is outside the partition's log.
    OffsetOutOfRange = 4, retriable: false;
    /// A batch (or request) is larger than the configured maximum.
    MessageTooLarge = 5, retriable: false;
    /// This broker does not lead the partition; refresh metadata.
    NotLeaderOrFollower = 6, retriable: true;
    /// The request did not complete within its timeout.
    RequestTimedOut = 7, retriable: true;
    /// The request is malformed or violates a protocol rule.
    InvalidRequest = 8, retriable: false;
    /// A topic with this name already exists.
    TopicAlreadyExists = 9, retriable: false;
    /// A partition count is invalid.
    InvalidPartitions = 10, retriable: false;
    /// A replication factor is invalid (or larger than the number of brokers).
    InvalidReplicationFactor = 11, retriable: false;
    /// A config key or value is invalid.
    InvalidConfig = 12, retriable: false;
    /// The partition's storage failed or is fenced (for example after corruption).
    StorageError = 13, retriable: true;
    /// A topic name is invalid.
    InvalidTopic = 14, retriable: false;
    /// A retried idempotent batch was already written (its original offsets are returned).
    DuplicateSequence = 15, retriable: false;
    /// An idempotent batch skipped sequence numbers.
    OutOfOrderSequence = 16, retriable: false;
    /// The producer id is unknown to the broker.
    UnknownProducerId = 17, retriable: true;
    /// The producer epoch is older than the broker's (a zombie producer).
    InvalidProducerEpoch = 18, retriable: false;
    /// Fewer in-sync replicas than `min.insync.replicas`.
    NotEnoughReplicas = 19, retriable: true;
    /// A broker limit (connections, in-flight calls, memory) was reached.
    ResourceExhausted = 20, retriable: true;
    /// The batch uses a compression codec this broker does not support.
    UnsupportedCompression = 21, retriable: false;
    /// The group has no member with this id (it left, or was fenced after its session timed out).
    UnknownMemberId = 22, retriable: false;
    /// The member's epoch is older than the coordinator's: it was fenced; rejoin.
    FencedMemberEpoch = 23, retriable: false;
    /// A commit or request carries an epoch that is not the member's current one.
    StaleMemberEpoch = 24, retriable: false;
    /// No such consumer group.
    GroupIdNotFound = 25, retriable: false;
    /// The group still has members (it cannot be deleted or reset now).
    NonEmptyGroup = 26, retriable: false;
    /// The group id is empty or too long.
    InvalidGroupId = 27, retriable: false;
    /// Another member with the same `group.instance.id` is active.
    UnreleasedInstanceId = 28, retriable: false;
    /// A produce interceptor rejected records of the batch (the message lists
    /// each rejected record and its reason); nothing was appended.
    InvalidRecord = 29, retriable: false;
    /// A plugin failed, trapped or ran out of time while its failure policy is
    /// fail-closed; nothing was appended (produce) or returned (fetch).
    PluginFailed = 30, retriable: false;
    /// An upload is not a valid plugin: not a component, not one of the
    /// contract's worlds, or not the hook it was uploaded as.
    InvalidPlugin = 31, retriable: false;
    /// No plugin (or attachment) of that name.
    PluginNotFound = 32, retriable: false;
    /// The plugin is attached to a topic or deployed; detach it first.
    PluginInUse = 33, retriable: false;
    /// No connection to the broker could be made, or it broke with a call in
    /// flight. Client-side only: a broker never sends it.
    NetworkError = 34, retriable: true;
    /// The broker asked does not coordinate this consumer group (it moved, or the
    /// client asked the wrong broker): find the coordinator again and retry.
    NotCoordinator = 35, retriable: true;
    /// The request carries a leader epoch older than one already recorded for
    /// the partition: its sender was deposed (a transform task on a former
    /// leader writing a late checkpoint).
    FencedLeaderEpoch = 36, retriable: false;
}

impl ErrorCode {
    /// The wire number.
    pub fn as_u16(self) -> u16 {
        self as u16
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.as_u16())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table is a contract: this snapshot changes only by appending a line.
    #[test]
    fn table_is_stable() {
        let table: Vec<String> = ErrorCode::ALL
            .iter()
            .map(|code| format!("{} {} {}", code.as_u16(), code.name(), code.is_retriable()))
            .collect();
        let expected = "1 UnknownServerError false
2 CorruptMessage false
3 UnknownTopicOrPartition true
4 OffsetOutOfRange false
5 MessageTooLarge false
6 NotLeaderOrFollower true
7 RequestTimedOut true
8 InvalidRequest false
9 TopicAlreadyExists false
10 InvalidPartitions false
11 InvalidReplicationFactor false
12 InvalidConfig false
13 StorageError true
14 InvalidTopic false
15 DuplicateSequence false
16 OutOfOrderSequence false
17 UnknownProducerId true
18 InvalidProducerEpoch false
19 NotEnoughReplicas true
20 ResourceExhausted true
21 UnsupportedCompression false
22 UnknownMemberId false
23 FencedMemberEpoch false
24 StaleMemberEpoch false
25 GroupIdNotFound false
26 NonEmptyGroup false
27 InvalidGroupId false
28 UnreleasedInstanceId false
29 InvalidRecord false
30 PluginFailed false
31 InvalidPlugin false
32 PluginNotFound false
33 PluginInUse false
34 NetworkError true
35 NotCoordinator true
36 FencedLeaderEpoch false";
        assert_eq!(table.join("\n"), expected);
    }

    #[test]
    fn numbers_round_trip_and_unknown_numbers_are_none() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_u16(code.as_u16()), Some(*code));
        }
        assert_eq!(ErrorCode::from_u16(0), None);
        assert_eq!(ErrorCode::from_u16(9999), None);
    }
}
