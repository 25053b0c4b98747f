//! Brokers that are not voters (DESIGN §3: "brokers that are not voters pull the
//! metadata log from the controller"): such a broker follows the metadata log as
//! a Raft learner. It never votes and never leads the quorum; it applies every
//! committed record like a voter, so it serves metadata, leads partitions and
//! forwards requests to the active controller the same way.
//!
//! Joining: a learner's log starts empty, and only the active controller can add
//! it to the quorum's membership. At start-up it asks the voters it was given
//! (`--controller-voters`) in turn, following a `NotController` answer to the
//! active one, until one adds it; the active controller then replicates the log
//! to it. A restarted learner asks again: already a learner at the same address,
//! it is answered at once without a new membership entry.

use std::time::Duration;

use openraft::BasicNode;
use serde::{Deserialize, Serialize};

use super::network::RaftCallKind;
use super::{Controller, NodeId, SubmitError};

/// A broker asking to follow the metadata log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Learner {
    pub node_id: NodeId,
    /// Where voters reach it (its advertised listener).
    pub address: String,
}

impl Controller {
    /// On the active controller: adds `learner` to the quorum's membership as a
    /// learner (or changes its address), and returns once that is committed.
    pub(super) async fn add_learner(&self, learner: &Learner) -> Result<(), SubmitError<String>> {
        if self.active_controller() != Some(self.node_id) {
            return Err(SubmitError::NotController { leader: self.active_controller() });
        }
        let known = {
            let metrics = self.raft.metrics();
            let metrics = metrics.borrow();
            let membership = metrics.membership_config.membership();
            if membership.voter_ids().any(|id| id == learner.node_id) {
                return Err(SubmitError::Refused(format!(
                    "broker {} is a voter; it cannot join as a learner",
                    learner.node_id
                )));
            }
            membership.get_node(&learner.node_id).map(|node| node.addr.clone())
        };
        if known.as_deref() == Some(learner.address.as_str()) {
            return Ok(());
        }
        let node = BasicNode::new(learner.address.clone());
        let added = tokio::time::timeout(super::SUBMIT_TIMEOUT, self.raft.add_learner(learner.node_id, node, false));
        match added.await {
            Ok(Ok(_)) => {
                tracing::info!(learner = learner.node_id, address = %learner.address, "broker follows the metadata log");
                Ok(())
            }
            Ok(Err(error)) => Err(match error.forward_to_leader() {
                Some(forward) => SubmitError::NotController { leader: forward.leader_id },
                None => SubmitError::Failed(error.to_string()),
            }),
            Err(_) => Err(SubmitError::Failed("adding the learner did not commit in time".to_owned())),
        }
    }

    /// Joins the quorum's log as a learner, unless this node is one of `voters`:
    /// asks the voters in turn until the active controller adds it, or `timeout`.
    pub async fn join_as_learner(&self, address: &str, timeout: Duration) -> Result<(), String> {
        let voters = &self.configured_voters;
        if voters.contains_key(&self.node_id) {
            return Ok(());
        }
        let request = Learner { node_id: self.node_id, address: address.to_owned() };
        let payload = serde_json::to_vec(&request).map_err(|error| error.to_string())?;
        let deadline = tokio::time::Instant::now() + timeout;
        let mut last_error = String::from("no voter answered");
        let mut pause = Duration::from_millis(50);
        loop {
            // The active controller as far as this node knows (once it follows
            // the log), else every voter in turn.
            let mut targets: Vec<NodeId> = self.active_controller().into_iter().collect();
            targets.extend(voters.keys().copied());
            let mut index = 0;
            while index < targets.len() {
                let target = targets[index];
                index += 1;
                let Some(target_address) = voters.get(&target) else { continue };
                let answer = self.transport.call(target, target_address, RaftCallKind::AddLearner, payload.clone());
                let answer = match answer.await {
                    Ok(bytes) => serde_json::from_slice::<Result<(), SubmitError<String>>>(&bytes)
                        .unwrap_or_else(|error| Err(SubmitError::Failed(format!("malformed answer: {error}")))),
                    Err(error) => Err(SubmitError::Failed(error.to_string())),
                };
                match answer {
                    Ok(()) => return Ok(()),
                    Err(SubmitError::Refused(reason)) => return Err(reason),
                    Err(SubmitError::NotController { leader: Some(leader) })
                        if !targets[index..].contains(&leader) && targets.len() < 4 * voters.len() =>
                    {
                        // Ask the active controller next.
                        targets.insert(index, leader);
                    }
                    Err(error) => last_error = format!("voter {target}: {error}"),
                }
            }
            if tokio::time::Instant::now() + pause >= deadline {
                return Err(format!("no active controller added this broker as a learner: {last_error}"));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }
}
