//! Broker liveness, kept by the active controller (Kafka's broker heartbeat
//! manager): brokers heartbeat it every `broker_heartbeat_ms`; a broker not heard
//! from for `broker_session_timeout_ms` is fenced (its leaderships move to other
//! ISR members, or to none). Heartbeat times are volatile — a newly elected active
//! controller gives every broker a full session from its election, so a failover
//! fences nobody by itself.
//!
//! A heartbeat's answer says whether the broker is fenced: a broker that was
//! fenced while cut off (and is heard from again) asks to be unfenced.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use broker_core::cluster::{BrokerId, ControllerRequest};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::network::RaftCallKind;
use super::{Controller, SubmitError};

/// What a broker tells the active controller on each heartbeat.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerHeartbeat {
    pub broker_id: BrokerId,
    pub broker_epoch: u64,
    /// The last metadata offset the broker applied (-1: none).
    pub metadata_offset: i64,
}

/// The active controller's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatAnswer {
    /// The broker's registration at this epoch is the current one.
    pub registered: bool,
    pub fenced: bool,
}

/// The last heartbeat of each broker, on this node while it is the active
/// controller.
#[derive(Debug, Default)]
pub struct Liveness {
    seen: HashMap<BrokerId, Seen>,
    /// When this node last became the active controller.
    leader_since: Option<Instant>,
}

#[derive(Clone, Copy, Debug)]
struct Seen {
    at: Instant,
    broker_epoch: u64,
    metadata_offset: i64,
}

pub(super) type SharedLiveness = Arc<Mutex<Liveness>>;

fn liveness(controller: &Controller) -> std::sync::MutexGuard<'_, Liveness> {
    controller.liveness.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Controller {
    /// Records a heartbeat; only the active controller takes them.
    pub(super) fn take_heartbeat(&self, heartbeat: &BrokerHeartbeat) -> Result<HeartbeatAnswer, SubmitError<String>> {
        if self.active_controller() != Some(self.node_id) {
            return Err(SubmitError::NotController { leader: self.active_controller() });
        }
        liveness(self).seen.insert(
            heartbeat.broker_id,
            Seen {
                at: Instant::now(),
                broker_epoch: heartbeat.broker_epoch,
                metadata_offset: heartbeat.metadata_offset,
            },
        );
        let broker = self.read(|image| image.brokers.get(&heartbeat.broker_id).cloned());
        match broker {
            Some(broker) if broker.epoch == heartbeat.broker_epoch => {
                Ok(HeartbeatAnswer { registered: true, fenced: broker.fenced })
            }
            // A later registration of this broker id replaced it.
            Some(broker) if broker.epoch > heartbeat.broker_epoch => {
                Ok(HeartbeatAnswer { registered: false, fenced: true })
            }
            // This controller has not applied the registration yet (just elected,
            // entries of the last leader still applying): the broker asks again.
            _ => Err(SubmitError::Failed(format!(
                "the active controller has not applied broker {}'s registration at epoch {} yet",
                heartbeat.broker_id, heartbeat.broker_epoch
            ))),
        }
    }

    /// Counts a registration or unfencing carried out here as a heartbeat: a
    /// broker gets a full session from then on, before its own heartbeats start.
    pub(super) fn heard_from(&self, broker_id: BrokerId, broker_epoch: u64) {
        let seen = Seen { at: Instant::now(), broker_epoch, metadata_offset: -1 };
        liveness(self).seen.insert(broker_id, seen);
    }

    /// Sends this broker's heartbeat to the active controller (here or forwarded).
    pub async fn heartbeat(&self, heartbeat: &BrokerHeartbeat) -> Result<HeartbeatAnswer, SubmitError<String>> {
        let leader = self.active_controller();
        match leader {
            None => Err(SubmitError::NotController { leader: None }),
            Some(leader) if leader == self.node_id => self.take_heartbeat(heartbeat),
            Some(leader) => {
                let payload = serde_json::to_vec(heartbeat).map_err(|error| SubmitError::Failed(error.to_string()))?;
                let answer = self.forward(leader, RaftCallKind::BrokerHeartbeat, payload).await?;
                serde_json::from_slice(&answer)
                    .map_err(|error| SubmitError::Failed(format!("malformed heartbeat answer: {error}")))?
            }
        }
    }

    /// The last metadata offset each broker reported (known on the active
    /// controller only).
    pub fn reported_offsets(&self) -> HashMap<BrokerId, i64> {
        liveness(self).seen.iter().map(|(broker_id, seen)| (*broker_id, seen.metadata_offset)).collect()
    }

    /// Runs on every node, acting while it is the active controller: fences the
    /// brokers whose session expired. Runs until aborted.
    pub async fn fence_silent_brokers(self, session_timeout: Duration) {
        let tick = (session_timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut ticks = tokio::time::interval(tick);
        loop {
            ticks.tick().await;
            let leading = self.active_controller() == Some(self.node_id);
            let expired: Vec<(BrokerId, u64)> = {
                let mut liveness = liveness(&self);
                if !leading {
                    liveness.leader_since = None;
                    continue;
                }
                let since = *liveness.leader_since.get_or_insert_with(Instant::now);
                let now = Instant::now();
                let active: Vec<(BrokerId, u64)> = self.read(|image| {
                    image
                        .brokers
                        .values()
                        .filter(|broker| !broker.fenced)
                        .map(|b| (b.registration.broker_id, b.epoch))
                        .collect()
                });
                active
                    .into_iter()
                    .filter(|(broker_id, epoch)| {
                        let last = liveness
                            .seen
                            .get(broker_id)
                            .filter(|seen| seen.broker_epoch == *epoch)
                            .map_or(since, |seen| seen.at.max(since));
                        now.duration_since(last) > session_timeout
                    })
                    .collect()
            };
            for (broker_id, broker_epoch) in expired {
                tracing::warn!(broker_id, broker_epoch, "broker session expired; fencing it");
                let request = ControllerRequest::FenceBroker { broker_id, broker_epoch };
                if let Err(error) = self.request(&request).await {
                    tracing::warn!(broker_id, %error, "could not fence a silent broker");
                }
            }
        }
    }
}
