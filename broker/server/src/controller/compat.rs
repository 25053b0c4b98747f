//! Reading controller files written before the quorum ran openraft's
//! `single-term-leader` mode (standard Raft, one leader per term).
//!
//! Before, a leader id was `(term T, node N)`, and two candidates could both lead
//! one term, told apart by node id, ordered by `(T, N)`. Now a log id's leader is
//! a term alone, and a vote's is `{"term", "voted_for"}`. An old leader id is read
//! as term `T << 32 | N`: one-to-one and in the same order, so entries of two
//! old leaders of one term never look alike (Raft matches entries by log id), and
//! a node's vote and log stay consistent. Broker ids are below 2^31.
//!
//! Every file is read through [`from_json`], which rewrites old-form leader ids
//! (objects `{"term", "node_id"}` under a `leader_id` key) before parsing. Files
//! written from then on are in the new form (the log's old frames stay as they
//! are and are read this way). Raft calls between voters are not converted: the
//! voters of a quorum are upgraded together (stopped, then started on the new
//! version).

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// Parses `bytes` as `T`, accepting leader ids in the old form. The old form is
/// looked for first: parsed as it is, an old vote would silently lose whom it
/// voted for (`voted_for` is optional, `node_id` unknown).
pub(crate) fn from_json<T: DeserializeOwned>(bytes: &[u8]) -> serde_json::Result<T> {
    let mut value: Value = serde_json::from_slice(bytes)?;
    upgrade(&mut value);
    serde_json::from_value(value)
}

/// Rewrites every old-form leader id under `value`.
fn upgrade(value: &mut Value) {
    match value {
        Value::Array(items) => items.iter_mut().for_each(upgrade),
        Value::Object(object) => {
            let is_vote = object.contains_key("committed") && object.contains_key("leader_id");
            for (key, child) in object.iter_mut() {
                match (key == "leader_id").then(|| old_leader_id(child)).flatten() {
                    Some((term, node_id)) => {
                        let term = Value::from(term << 32 | node_id);
                        *child = match is_vote {
                            true => Value::Object(Map::from_iter([
                                ("term".to_owned(), term),
                                ("voted_for".to_owned(), Value::from(node_id)),
                            ])),
                            false => term,
                        };
                    }
                    None => upgrade(child),
                }
            }
        }
        _ => {}
    }
}

/// `{"term": T, "node_id": N}` → `(T, N)`.
fn old_leader_id(value: &Value) -> Option<(u64, u64)> {
    let object = value.as_object()?;
    match (object.len(), object.get("term")?.as_u64()?, object.get("node_id")?.as_u64()?) {
        (2, term, node_id) if term < 1 << 32 && node_id < 1 << 31 => Some((term, node_id)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::from_json;
    use crate::controller::{Entry, NodeId};
    use openraft::{CommittedLeaderId, EntryPayload, LogId, Vote};

    #[test]
    fn files_of_the_earlier_form_are_read() {
        let vote: Vote<NodeId> = from_json(br#"{"leader_id":{"term":3,"node_id":2},"committed":true}"#).unwrap();
        assert_eq!(vote, Vote::new_committed(3 << 32 | 2, 2));
        let log_id: Option<LogId<NodeId>> = from_json(br#"{"leader_id":{"term":4,"node_id":1},"index":9}"#).unwrap();
        assert_eq!(log_id, Some(LogId::new(CommittedLeaderId::new(4 << 32 | 1, 0), 9)));
        // Two leaders of one old term stay apart, in the old order.
        let other: LogId<NodeId> = from_json(br#"{"leader_id":{"term":4,"node_id":2},"index":9}"#).unwrap();
        assert!(Some(other) > log_id);
        let entry: Entry = from_json(
            br#"{"log_id":{"leader_id":{"term":1,"node_id":1},"index":0},"payload":{"Membership":{"configs":[[1]],"nodes":{"1":{"addr":"127.0.0.1:9292"}}}}}"#,
        )
        .unwrap();
        assert_eq!(entry.log_id.index, 0);
        assert!(matches!(entry.payload, EntryPayload::Membership(_)));
        // The current form is read as it is; garbage is still refused.
        let current: Vote<NodeId> = from_json(br#"{"leader_id":{"term":3,"voted_for":2},"committed":false}"#).unwrap();
        assert_eq!(current, Vote::new(3, 2));
        assert!(from_json::<Vote<NodeId>>(br#"{"leader_id":{"term":"x","node_id":2},"committed":true}"#).is_err());
        // Only leader ids are rewritten.
        let untouched: serde_json::Value = from_json(br#"{"other":{"term":1,"node_id":2}}"#).unwrap();
        assert_eq!(untouched, serde_json::json!({"other": {"term": 1, "node_id": 2}}));
    }
}
