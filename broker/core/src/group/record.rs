//! [`GroupRecord`]: what the group coordinator writes to `__consumer_offsets`, and
//! the bytes it is stored as (a record key and an optional value, like Kafka's
//! compacted coordinator records: a missing value is a tombstone).
//!
//! Key layout: `version u8 = 0`, `kind u8`, then the key fields. Value layout:
//! `version u8 = 0` (1 for an `Offset` with a leader epoch), then the value
//! fields. Strings are `u16` length + UTF-8, lists are `u32` count + items,
//! integers big-endian. Decoding checks every length
//! and fails with a typed [`RecordDecodeError`], never panics: these bytes come
//! back from disk.
//!
//! Kinds (one key per kind and identity, so the newest record of a key is the
//! state, and replaying the log from the start rebuilds every group):
//! 1. `Group` (group id) → epoch, assignor. Tombstone: group deleted.
//! 2. `Member` (group, member id) → instance id, subscription, session timeout.
//! 3. `TargetAssignment` (group, member id) → the partitions the member should own.
//! 4. `TargetEpoch` (group) → the group epoch the target assignment was computed at.
//! 5. `CurrentAssignment` (group, member id) → member epoch, owned, revoking.
//! 6. `Offset` (group, topic, partition) → committed offset, metadata, time, and,
//!    in value version 1, the partition's leader epoch the committer sent.
//! 7. `Snapshot` start and end markers (no group): the records between them are
//!    the coordinator's whole state, replacing everything before them — but only
//!    once the end marker is read (a torn snapshot changes nothing).

use super::assignor::TopicPartition;

const FORMAT_VERSION: u8 = 0;
/// The value version of an `Offset` that ends with the leader epoch it was
/// committed under (version 0 has none).
const OFFSET_WITH_EPOCH: u8 = 1;

/// A member's subscription and settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberValue {
    pub instance_id: Option<String>,
    pub subscribed_topics: Vec<String>,
    pub session_timeout_ms: u32,
}

/// A member's reconciled state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CurrentAssignmentValue {
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    /// Partitions the member owns.
    pub assigned: Vec<TopicPartition>,
    /// Partitions the member was told to give up and has not confirmed yet.
    pub revoking: Vec<TopicPartition>,
}

/// A committed offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetValue {
    pub offset: i64,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    /// The committed partition's leader epoch as the committer knew it, when it
    /// sent one (transform checkpoints do; consumers do not). A commit carrying
    /// an older epoch cannot replace this one. Stored after the timestamp, so
    /// records written before it existed read as `None`.
    pub leader_epoch: Option<i32>,
}

/// One coordinator record; `None` values are tombstones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupRecord {
    Group {
        group_id: String,
        value: Option<(i32, String)>,
    },
    Member {
        group_id: String,
        member_id: String,
        value: Option<MemberValue>,
    },
    TargetAssignment {
        group_id: String,
        member_id: String,
        value: Option<Vec<TopicPartition>>,
    },
    TargetEpoch {
        group_id: String,
        value: Option<i32>,
    },
    CurrentAssignment {
        group_id: String,
        member_id: String,
        value: Option<CurrentAssignmentValue>,
    },
    Offset {
        group_id: String,
        topic: String,
        partition: u32,
        value: Option<OffsetValue>,
    },
    /// `start: true` opens a snapshot, `false` closes it.
    Snapshot {
        start: bool,
    },
}

/// Stored bytes that are not a valid record.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid group record: {reason}")]
pub struct RecordDecodeError {
    pub reason: String,
}

struct Writer(Vec<u8>);

impl Writer {
    fn new(kind: u8) -> Writer {
        Writer(vec![FORMAT_VERSION, kind])
    }
    fn u8(&mut self, value: u8) {
        self.0.push(value);
    }
    fn u32(&mut self, value: u32) {
        self.0.extend_from_slice(&value.to_be_bytes());
    }
    fn i32(&mut self, value: i32) {
        self.0.extend_from_slice(&value.to_be_bytes());
    }
    fn i64(&mut self, value: i64) {
        self.0.extend_from_slice(&value.to_be_bytes());
    }
    fn str(&mut self, value: &str) {
        let bytes = &value.as_bytes()[..value.len().min(u16::MAX as usize)];
        self.0.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
        self.0.extend_from_slice(bytes);
    }
    fn partitions(&mut self, partitions: &[TopicPartition]) {
        self.u32(partitions.len() as u32);
        for partition in partitions {
            self.str(&partition.topic);
            self.u32(partition.partition);
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, count: usize) -> Result<&'a [u8], RecordDecodeError> {
        if self.bytes.len() < count {
            return Err(RecordDecodeError { reason: format!("needs {count} more bytes, has {}", self.bytes.len()) });
        }
        let (head, tail) = self.bytes.split_at(count);
        self.bytes = tail;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], RecordDecodeError> {
        let mut array = [0u8; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }
    fn u8(&mut self) -> Result<u8, RecordDecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, RecordDecodeError> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    fn i32(&mut self) -> Result<i32, RecordDecodeError> {
        Ok(i32::from_be_bytes(self.array()?))
    }
    fn i64(&mut self) -> Result<i64, RecordDecodeError> {
        Ok(i64::from_be_bytes(self.array()?))
    }
    fn str(&mut self) -> Result<String, RecordDecodeError> {
        let length = u16::from_be_bytes(self.array()?) as usize;
        let bytes = self.take(length)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| RecordDecodeError { reason: "string is not UTF-8".to_owned() })
    }
    fn partitions(&mut self) -> Result<Vec<TopicPartition>, RecordDecodeError> {
        let count = self.u32()? as usize;
        // Each entry takes at least 6 bytes: a count past what is left is corrupt.
        if count > self.bytes.len() / 6 {
            return Err(RecordDecodeError { reason: format!("{count} partitions cannot fit") });
        }
        (0..count).map(|_| Ok(TopicPartition { topic: self.str()?, partition: self.u32()? })).collect()
    }
    fn strings(&mut self) -> Result<Vec<String>, RecordDecodeError> {
        let count = self.u32()? as usize;
        if count > self.bytes.len() / 2 {
            return Err(RecordDecodeError { reason: format!("{count} strings cannot fit") });
        }
        (0..count).map(|_| self.str()).collect()
    }
    fn end(self) -> Result<(), RecordDecodeError> {
        match self.bytes.is_empty() {
            true => Ok(()),
            false => Err(RecordDecodeError { reason: format!("{} bytes after the record", self.bytes.len()) }),
        }
    }
}

const GROUP: u8 = 1;
const MEMBER: u8 = 2;
const TARGET_ASSIGNMENT: u8 = 3;
const TARGET_EPOCH: u8 = 4;
const CURRENT_ASSIGNMENT: u8 = 5;
const OFFSET: u8 = 6;
const SNAPSHOT_START: u8 = 7;
const SNAPSHOT_END: u8 = 8;

impl GroupRecord {
    /// The group the record belongs to.
    pub fn group_id(&self) -> &str {
        match self {
            GroupRecord::Group { group_id, .. }
            | GroupRecord::Member { group_id, .. }
            | GroupRecord::TargetAssignment { group_id, .. }
            | GroupRecord::TargetEpoch { group_id, .. }
            | GroupRecord::CurrentAssignment { group_id, .. }
            | GroupRecord::Offset { group_id, .. } => group_id,
            GroupRecord::Snapshot { .. } => "",
        }
    }

    /// The record's key and value bytes (`None`: tombstone).
    pub fn encode(&self) -> (Vec<u8>, Option<Vec<u8>>) {
        let value_writer = || Writer(vec![FORMAT_VERSION]);
        match self {
            GroupRecord::Group { group_id, value } => {
                let mut key = Writer::new(GROUP);
                key.str(group_id);
                let value = value.as_ref().map(|(epoch, assignor)| {
                    let mut writer = value_writer();
                    writer.i32(*epoch);
                    writer.str(assignor);
                    writer.0
                });
                (key.0, value)
            }
            GroupRecord::Member { group_id, member_id, value } => {
                let mut key = Writer::new(MEMBER);
                key.str(group_id);
                key.str(member_id);
                let value = value.as_ref().map(|member| {
                    let mut writer = value_writer();
                    writer.u8(member.instance_id.is_some() as u8);
                    writer.str(member.instance_id.as_deref().unwrap_or(""));
                    writer.u32(member.subscribed_topics.len() as u32);
                    member.subscribed_topics.iter().for_each(|topic| writer.str(topic));
                    writer.u32(member.session_timeout_ms);
                    writer.0
                });
                (key.0, value)
            }
            GroupRecord::TargetAssignment { group_id, member_id, value } => {
                let mut key = Writer::new(TARGET_ASSIGNMENT);
                key.str(group_id);
                key.str(member_id);
                let value = value.as_ref().map(|partitions| {
                    let mut writer = value_writer();
                    writer.partitions(partitions);
                    writer.0
                });
                (key.0, value)
            }
            GroupRecord::TargetEpoch { group_id, value } => {
                let mut key = Writer::new(TARGET_EPOCH);
                key.str(group_id);
                let value = value.map(|epoch| {
                    let mut writer = value_writer();
                    writer.i32(epoch);
                    writer.0
                });
                (key.0, value)
            }
            GroupRecord::CurrentAssignment { group_id, member_id, value } => {
                let mut key = Writer::new(CURRENT_ASSIGNMENT);
                key.str(group_id);
                key.str(member_id);
                let value = value.as_ref().map(|current| {
                    let mut writer = value_writer();
                    writer.i32(current.member_epoch);
                    writer.i32(current.previous_member_epoch);
                    writer.partitions(&current.assigned);
                    writer.partitions(&current.revoking);
                    writer.0
                });
                (key.0, value)
            }
            GroupRecord::Snapshot { start } => {
                let mut key = Writer::new(if *start { SNAPSHOT_START } else { SNAPSHOT_END });
                key.str("");
                (key.0, Some(value_writer().0))
            }
            GroupRecord::Offset { group_id, topic, partition, value } => {
                let mut key = Writer::new(OFFSET);
                key.str(group_id);
                key.str(topic);
                key.u32(*partition);
                let value = value.as_ref().map(|offset| {
                    let version = if offset.leader_epoch.is_some() { OFFSET_WITH_EPOCH } else { FORMAT_VERSION };
                    let mut writer = Writer(vec![version]);
                    writer.i64(offset.offset);
                    writer.str(&offset.metadata);
                    writer.i64(offset.commit_timestamp_ms);
                    if let Some(epoch) = offset.leader_epoch {
                        writer.i32(epoch);
                    }
                    writer.0
                });
                (key.0, value)
            }
        }
    }

    /// Parses a stored key and value (see the module docs for the layout).
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<GroupRecord, RecordDecodeError> {
        let mut key = Reader { bytes: key };
        let version = key.u8()?;
        if version != FORMAT_VERSION {
            return Err(RecordDecodeError { reason: format!("unknown key version {version}") });
        }
        let kind = key.u8()?;
        let group_id = key.str()?;
        let mut value_version = FORMAT_VERSION;
        let mut value = match value {
            Some(bytes) => {
                let mut reader = Reader { bytes };
                value_version = reader.u8()?;
                let known = value_version == FORMAT_VERSION || (kind == OFFSET && value_version == OFFSET_WITH_EPOCH);
                if !known {
                    return Err(RecordDecodeError { reason: format!("unknown value version {value_version}") });
                }
                Some(reader)
            }
            None => None,
        };
        let record = match kind {
            GROUP => {
                let value = value.as_mut().map(|reader| Ok::<_, RecordDecodeError>((reader.i32()?, reader.str()?)));
                GroupRecord::Group { group_id, value: value.transpose()? }
            }
            MEMBER => {
                let member_id = key.str()?;
                let value = value.as_mut().map(|reader| {
                    let has_instance = reader.u8()? == 1;
                    let instance_id = reader.str()?;
                    Ok::<_, RecordDecodeError>(MemberValue {
                        instance_id: has_instance.then_some(instance_id),
                        subscribed_topics: reader.strings()?,
                        session_timeout_ms: reader.u32()?,
                    })
                });
                GroupRecord::Member { group_id, member_id, value: value.transpose()? }
            }
            TARGET_ASSIGNMENT => {
                let member_id = key.str()?;
                let value = value.as_mut().map(Reader::partitions).transpose()?;
                GroupRecord::TargetAssignment { group_id, member_id, value }
            }
            TARGET_EPOCH => GroupRecord::TargetEpoch { group_id, value: value.as_mut().map(Reader::i32).transpose()? },
            CURRENT_ASSIGNMENT => {
                let member_id = key.str()?;
                let value = value.as_mut().map(|reader| {
                    Ok::<_, RecordDecodeError>(CurrentAssignmentValue {
                        member_epoch: reader.i32()?,
                        previous_member_epoch: reader.i32()?,
                        assigned: reader.partitions()?,
                        revoking: reader.partitions()?,
                    })
                });
                GroupRecord::CurrentAssignment { group_id, member_id, value: value.transpose()? }
            }
            OFFSET => {
                let topic = key.str()?;
                let partition = key.u32()?;
                let value = value.as_mut().map(|reader| {
                    Ok::<_, RecordDecodeError>(OffsetValue {
                        offset: reader.i64()?,
                        metadata: reader.str()?,
                        commit_timestamp_ms: reader.i64()?,
                        leader_epoch: match value_version == OFFSET_WITH_EPOCH {
                            true => Some(reader.i32()?),
                            false => None,
                        },
                    })
                });
                GroupRecord::Offset { group_id, topic, partition, value: value.transpose()? }
            }
            SNAPSHOT_START | SNAPSHOT_END => {
                if value.is_none() || !group_id.is_empty() {
                    return Err(RecordDecodeError { reason: "a snapshot marker has a value and no group".to_owned() });
                }
                GroupRecord::Snapshot { start: kind == SNAPSHOT_START }
            }
            other => return Err(RecordDecodeError { reason: format!("unknown record kind {other}") }),
        };
        key.end()?;
        if let Some(reader) = value {
            reader.end()?;
        }
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn partition(topic: &str, partition: u32) -> TopicPartition {
        TopicPartition { topic: topic.to_owned(), partition }
    }

    fn examples() -> Vec<GroupRecord> {
        let group_id = "orders-app".to_owned();
        vec![
            GroupRecord::Group { group_id: group_id.clone(), value: Some((7, "cooperative-sticky".to_owned())) },
            GroupRecord::Group { group_id: group_id.clone(), value: None },
            GroupRecord::Member {
                group_id: group_id.clone(),
                member_id: "m-1".to_owned(),
                value: Some(MemberValue {
                    instance_id: Some("pod-3".to_owned()),
                    subscribed_topics: vec!["a".to_owned(), "b".to_owned()],
                    session_timeout_ms: 45_000,
                }),
            },
            GroupRecord::Member {
                group_id: group_id.clone(),
                member_id: "m-2".to_owned(),
                value: Some(MemberValue { instance_id: None, subscribed_topics: vec![], session_timeout_ms: 1 }),
            },
            GroupRecord::TargetAssignment {
                group_id: group_id.clone(),
                member_id: "m-1".to_owned(),
                value: Some(vec![partition("a", 0), partition("b", 3)]),
            },
            GroupRecord::TargetEpoch { group_id: group_id.clone(), value: Some(7) },
            GroupRecord::CurrentAssignment {
                group_id: group_id.clone(),
                member_id: "m-1".to_owned(),
                value: Some(CurrentAssignmentValue {
                    member_epoch: 7,
                    previous_member_epoch: 6,
                    assigned: vec![partition("a", 0)],
                    revoking: vec![partition("a", 1)],
                }),
            },
            GroupRecord::Offset {
                group_id,
                topic: "a".to_owned(),
                partition: 0,
                value: Some(OffsetValue {
                    offset: 42,
                    metadata: "m".to_owned(),
                    commit_timestamp_ms: 1_700_000_000_000,
                    leader_epoch: None,
                }),
            },
            GroupRecord::Offset {
                group_id: "transforms".to_owned(),
                topic: "b".to_owned(),
                partition: 3,
                value: Some(OffsetValue {
                    offset: 7,
                    metadata: "{}".to_owned(),
                    commit_timestamp_ms: 1_700_000_000_000,
                    leader_epoch: Some(12),
                }),
            },
            GroupRecord::Snapshot { start: true },
            GroupRecord::Snapshot { start: false },
        ]
    }

    #[test]
    fn every_kind_round_trips_and_truncations_are_errors() {
        for record in examples() {
            let (key, value) = record.encode();
            assert_eq!(GroupRecord::decode(&key, value.as_deref()).unwrap(), record);
            for cut in 0..key.len() {
                assert!(GroupRecord::decode(&key[..cut], value.as_deref()).is_err(), "{record:?} key cut at {cut}");
            }
            if let Some(value) = &value {
                for cut in 0..value.len() {
                    assert!(GroupRecord::decode(&key, Some(&value[..cut])).is_err(), "{record:?} value cut at {cut}");
                }
                let mut longer = value.clone();
                longer.push(0);
                assert!(GroupRecord::decode(&key, Some(&longer)).is_err());
            }
        }
    }

    #[test]
    fn huge_counts_are_refused_without_allocating() {
        let mut key = vec![FORMAT_VERSION, TARGET_ASSIGNMENT, 0, 1, b'g', 0, 1, b'm'];
        let value = [FORMAT_VERSION, 0xff, 0xff, 0xff, 0xff];
        assert!(GroupRecord::decode(&key, Some(&value)).is_err());
        key[1] = 99;
        assert!(GroupRecord::decode(&key, None).is_err());
    }
}
