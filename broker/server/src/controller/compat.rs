//! Reading controller files written before the quorum ran openraft's
//! `single-term-leader` mode (standard Raft, one leader per term).
//!
//! Before, a leader id was `{"term": T, "node_id": N}` everywhere. Now a log id's
//! leader is its term alone (`T`), and a vote's is `{"term": T, "voted_for": N}`.
//! Every file is read through [`from_json`], which rewrites old-form leader ids
//! before parsing. Files written from then on are in the new form (the log's old
//! frames stay as they are and are read this way).

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

/// Rewrites every old-form leader id under `value`; returns whether there was one.
fn upgrade(value: &mut Value) -> bool {
    match value {
        Value::Array(items) => items.iter_mut().fold(false, |changed, item| upgrade(item) | changed),
        Value::Object(object) => {
            let is_vote = object.contains_key("committed") && object.contains_key("leader_id");
            let mut changed = false;
            for (key, child) in object.iter_mut() {
                if let Some((term, node_id)) = old_leader_id(child) {
                    *child = match is_vote && key == "leader_id" {
                        true => Value::Object(Map::from_iter([
                            ("term".to_owned(), term),
                            ("voted_for".to_owned(), node_id),
                        ])),
                        false => term,
                    };
                    changed = true;
                } else {
                    changed |= upgrade(child);
                }
            }
            changed
        }
        _ => false,
    }
}

/// `{"term": T, "node_id": N}` → `(T, N)`.
fn old_leader_id(value: &Value) -> Option<(Value, Value)> {
    let object = value.as_object()?;
    match (object.len(), object.get("term"), object.get("node_id")) {
        (2, Some(term), Some(node_id)) if term.is_u64() && node_id.is_u64() => Some((term.clone(), node_id.clone())),
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
        assert_eq!(vote, Vote::new_committed(3, 2));
        let log_id: Option<LogId<NodeId>> = from_json(br#"{"leader_id":{"term":4,"node_id":1},"index":9}"#).unwrap();
        assert_eq!(log_id, Some(LogId::new(CommittedLeaderId::new(4, 0), 9)));
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
    }
}
