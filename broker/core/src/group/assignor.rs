//! Consumer-group partition assignors: pure functions from a group's members, their
//! subscriptions and the topics' partition counts to a target [`Assignment`].
//!
//! The group coordinator computes assignments on the server (as in Kafka's KIP-848)
//! and calls [`assign`] whenever membership, subscriptions or partition counts
//! change. This file does no IO, keeps no state and reads no clock: the same inputs
//! give the same [`Assignment`], whatever the order of the `members` slice.
//!
//! Invariants of every [`Assignment`] (pinned down by `broker/core/tests/assignor.rs`):
//! - every member id of the input has an entry, possibly empty;
//! - every partition of every topic that is in `partition_counts` and that at least
//!   one member subscribes to is assigned to exactly one member; nothing else is
//!   assigned (topics missing from `partition_counts` are not assignable);
//! - a member only gets partitions of topics it subscribes to.
//!
//! **Member order.** All three assignors walk members in one stable order: by
//! [`MemberSpec::stable_key`] (the `group.instance.id` of a static member, else its
//! member id), ties broken by member id and then by the remaining fields. A static
//! member that restarts with a new member id therefore keeps its place, and its
//! partitions. Member ids are expected to be unique; if one repeats, the first spec
//! in that order wins and the others are ignored.
//!
//! **Range** (Kafka's `RangeAssignor`): per topic, the topic's subscribers in member
//! order get contiguous ranges of partitions; with `count` partitions and `n`
//! subscribers the first `count % n` get one extra. Balanced per topic, not across
//! topics: the first members collect every topic's extras.
//!
//! **RoundRobin** (Kafka's `RoundRobinAssignor`): all assignable partitions, sorted
//! by (topic, partition), are dealt to members in order, skipping members that do
//! not subscribe to the partition's topic; the deal resumes after the last receiver.
//!
//! **CooperativeSticky**: balanced, and moves as few partitions as it can:
//! 1. Keep each member's `current` partitions, except those of topics it no longer
//!    subscribes to, those that no longer exist, and those an earlier member (in
//!    member order) already kept: a partition claimed twice stays with one owner.
//! 2. Give every partition still unowned, in (topic, partition) order, to the
//!    least-loaded member that subscribes to its topic (ties: member order).
//! 3. Repeatedly move one partition from a most-loaded member to the least-loaded
//!    member that subscribes to its topic, while the two loads differ by two or
//!    more. Givers are tried from the most loaded down (ties: member order); for a
//!    giver, the topic whose least-loaded subscriber has the smallest load wins
//!    (ties: topic order), and the giver's lowest partition of that topic moves.
//!    Each move lowers the sum of squared loads by at least 2, so the loop ends.
//!
//! When all members share one subscription this ends with loads that differ by at
//! most one, and moves the minimum number of kept partitions: no member both gives
//! and receives, and no giver ends below a receiver. With heterogeneous
//! subscriptions it is a best effort that ends "locally balanced": no member owns
//! a partition that another subscriber, loaded two or more less, could take. Feeding
//! an output back as every member's `current` returns it unchanged.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

/// A topic partition.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: u32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: u32) -> TopicPartition {
        TopicPartition { topic: topic.into(), partition }
    }
}

/// What the assignor knows about one member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberSpec {
    pub member_id: String,
    /// Static membership id (`group.instance.id`), if any.
    pub instance_id: Option<String>,
    /// Topics the member subscribes to; the assignor sorts and deduplicates them.
    pub subscribed_topics: Vec<String>,
    /// What the member currently owns (target of the previous assignment) — used by
    /// sticky assignors.
    pub current: BTreeSet<TopicPartition>,
}

impl MemberSpec {
    /// The key that orders members: the instance id of a static member, else the
    /// member id. See the module docs.
    pub fn stable_key(&self) -> &str {
        self.instance_id.as_deref().unwrap_or(&self.member_id)
    }
}

/// Which assignor to run; [`AssignorKind::name`] is the name clients use
/// (`partition.assignment.strategy`, `group.remote.assignor`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AssignorKind {
    Range,
    RoundRobin,
    CooperativeSticky,
}

impl AssignorKind {
    /// Every assignor, in a fixed order.
    pub const ALL: [AssignorKind; 3] = [AssignorKind::Range, AssignorKind::RoundRobin, AssignorKind::CooperativeSticky];

    pub fn name(self) -> &'static str {
        match self {
            AssignorKind::Range => "range",
            AssignorKind::RoundRobin => "roundrobin",
            AssignorKind::CooperativeSticky => "cooperative-sticky",
        }
    }

    /// The assignor called `name` (exact, as [`AssignorKind::name`] spells it).
    pub fn parse(name: &str) -> Option<AssignorKind> {
        AssignorKind::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

/// Target assignment: member_id -> partitions. Every member of `members` has an
/// entry (possibly empty).
pub type Assignment = BTreeMap<String, BTreeSet<TopicPartition>>;

/// Computes the target assignment with the assignor `kind` (see the module docs).
///
/// `partition_counts`: topic -> number of partitions (topics missing here are
/// ignored: not assignable).
pub fn assign(kind: AssignorKind, members: &[MemberSpec], partition_counts: &BTreeMap<String, u32>) -> Assignment {
    let group = Group::new(members, partition_counts);
    let owned = match kind {
        AssignorKind::Range => assign_range(&group),
        AssignorKind::RoundRobin => assign_round_robin(&group),
        AssignorKind::CooperativeSticky => assign_cooperative_sticky(&group),
    };
    group.members.iter().zip(owned).map(|(member, partitions)| (member.spec.member_id.clone(), partitions)).collect()
}

/// One member, with its subscription reduced to the topics that exist.
#[derive(Debug)]
struct Member<'a> {
    spec: &'a MemberSpec,
    topics: BTreeSet<&'a str>,
}

/// The assignors' input in canonical form; members are referred to by their index
/// in `members`.
#[derive(Debug)]
struct Group<'a> {
    /// In member order (module docs), member ids unique.
    members: Vec<Member<'a>>,
    /// The assignable topics: in `partition_counts` and subscribed by some member.
    topics: BTreeMap<&'a str, u32>,
}

impl<'a> Group<'a> {
    fn new(specs: &'a [MemberSpec], partition_counts: &'a BTreeMap<String, u32>) -> Group<'a> {
        let mut ordered: Vec<_> = specs
            .iter()
            .map(|spec| {
                let subscribed: BTreeSet<&str> = spec.subscribed_topics.iter().map(String::as_str).collect();
                let order_key =
                    (spec.stable_key(), spec.member_id.as_str(), &spec.instance_id, subscribed, &spec.current);
                (order_key, spec)
            })
            .collect();
        ordered.sort_by(|(left, _), (right, _)| left.cmp(right));
        let mut member_ids = BTreeSet::new();
        let mut members = Vec::with_capacity(ordered.len());
        let mut topics = BTreeMap::new();
        for ((_, _, _, subscribed, _), spec) in ordered {
            if !member_ids.insert(spec.member_id.as_str()) {
                continue;
            }
            let mut existing = BTreeSet::new();
            for topic in subscribed {
                if let Some((name, &partition_count)) = partition_counts.get_key_value(topic) {
                    existing.insert(name.as_str());
                    topics.insert(name.as_str(), partition_count);
                }
            }
            members.push(Member { spec, topics: existing });
        }
        Group { members, topics }
    }

    /// Indexes of the members that subscribe to `topic`, in member order.
    fn subscribers<'s>(&'s self, topic: &'s str) -> impl Iterator<Item = usize> + 's {
        self.members.iter().enumerate().filter(move |(_, member)| member.topics.contains(topic)).map(|(index, _)| index)
    }

    /// Whether `partition` exists and member `index` subscribes to its topic.
    fn is_assignable_to(&self, index: usize, partition: &TopicPartition) -> bool {
        let subscribed = self.members[index].topics.contains(partition.topic.as_str());
        subscribed && self.topics.get(partition.topic.as_str()).is_some_and(|&count| partition.partition < count)
    }

    fn empty_assignment(&self) -> Vec<BTreeSet<TopicPartition>> {
        vec![BTreeSet::new(); self.members.len()]
    }
}

/// Range: contiguous ranges per topic, the first `count % n` subscribers one extra.
fn assign_range(group: &Group<'_>) -> Vec<BTreeSet<TopicPartition>> {
    let mut owned = group.empty_assignment();
    for (&topic, &partition_count) in &group.topics {
        let subscribers: Vec<usize> = group.subscribers(topic).collect();
        let subscriber_count = subscribers.len() as u64;
        let per_member = u64::from(partition_count) / subscriber_count;
        let extra_count = u64::from(partition_count) % subscriber_count;
        let mut partitions = 0..partition_count;
        for (position, member_index) in subscribers.into_iter().enumerate() {
            let length = per_member + u64::from((position as u64) < extra_count);
            let range = partitions.by_ref().take(length as usize);
            owned[member_index].extend(range.map(|partition| TopicPartition::new(topic, partition)));
        }
    }
    owned
}

/// RoundRobin: deal sorted partitions over members, skipping non-subscribers.
fn assign_round_robin(group: &Group<'_>) -> Vec<BTreeSet<TopicPartition>> {
    let mut owned = group.empty_assignment();
    let member_count = group.members.len();
    let mut next_member_index = 0;
    for (&topic, &partition_count) in &group.topics {
        for partition in 0..partition_count {
            let receiver = (0..member_count)
                .map(|step| (next_member_index + step) % member_count)
                .find(|&index| group.members[index].topics.contains(topic))
                .expect("an assignable topic has a subscriber");
            owned[receiver].insert(TopicPartition::new(topic, partition));
            next_member_index = (receiver + 1) % member_count;
        }
    }
    owned
}

/// CooperativeSticky: steps 1–3 of the module docs.
fn assign_cooperative_sticky(group: &Group<'_>) -> Vec<BTreeSet<TopicPartition>> {
    let mut loads = Loads::new(group);
    // 1. Keep valid, uncontested current partitions.
    let mut owned_partitions: BTreeSet<&TopicPartition> = BTreeSet::new();
    for (index, member) in group.members.iter().enumerate() {
        for partition in &member.spec.current {
            if group.is_assignable_to(index, partition) && owned_partitions.insert(partition) {
                loads.add(index, partition.clone());
            }
        }
    }
    // 2. Unowned partitions go to the least-loaded subscriber.
    for (&topic, &partition_count) in &group.topics {
        for partition in (0..partition_count).map(|partition| TopicPartition::new(topic, partition)) {
            if !owned_partitions.contains(&partition) {
                let (_, receiver) = loads.least_loaded_subscriber(topic).expect("an assignable topic has a subscriber");
                loads.add(receiver, partition);
            }
        }
    }
    // 3. Move partitions from the most to the least loaded while that helps.
    while let Some(step) = loads.best_move() {
        loads.remove(step.giver, &step.partition);
        loads.add(step.receiver, step.partition);
    }
    loads.owned
}

/// One partition changing owner in step 3.
#[derive(Debug)]
struct Move {
    giver: usize,
    receiver: usize,
    partition: TopicPartition,
}

/// The sticky assignor's working state: who owns what, indexed by load so that the
/// most- and least-loaded members are found without scanning.
#[derive(Debug)]
struct Loads<'g, 'a> {
    group: &'g Group<'a>,
    /// Partitions owned, per member index.
    owned: Vec<BTreeSet<TopicPartition>>,
    /// (load, Reverse(member index)): iterated backwards, the most loaded first and
    /// ties in member order.
    by_load: BTreeSet<(usize, Reverse<usize>)>,
    /// Per assignable topic, its subscribers as (load, member index): the first is
    /// the least loaded, ties in member order.
    subscribers_by_load: BTreeMap<&'a str, BTreeSet<(usize, usize)>>,
}

impl<'g, 'a> Loads<'g, 'a> {
    fn new(group: &'g Group<'a>) -> Loads<'g, 'a> {
        let mut subscribers_by_load: BTreeMap<&'a str, BTreeSet<(usize, usize)>> = BTreeMap::new();
        for (index, member) in group.members.iter().enumerate() {
            for &topic in &member.topics {
                subscribers_by_load.entry(topic).or_default().insert((0, index));
            }
        }
        let by_load = (0..group.members.len()).map(|index| (0, Reverse(index))).collect();
        Loads { group, owned: group.empty_assignment(), by_load, subscribers_by_load }
    }

    /// (load, member index) of the least-loaded subscriber of `topic`.
    fn least_loaded_subscriber(&self, topic: &str) -> Option<(usize, usize)> {
        self.subscribers_by_load.get(topic).and_then(|subscribers| subscribers.first().copied())
    }

    fn add(&mut self, index: usize, partition: TopicPartition) {
        self.update_load(index, |owned| {
            owned.insert(partition);
        });
    }

    fn remove(&mut self, index: usize, partition: &TopicPartition) {
        self.update_load(index, |owned| {
            owned.remove(partition);
        });
    }

    /// Applies `change` to member `index`'s partitions and re-indexes its load.
    fn update_load(&mut self, index: usize, change: impl FnOnce(&mut BTreeSet<TopicPartition>)) {
        let old_load = self.owned[index].len();
        change(&mut self.owned[index]);
        let new_load = self.owned[index].len();
        self.by_load.remove(&(old_load, Reverse(index)));
        self.by_load.insert((new_load, Reverse(index)));
        for &topic in &self.group.members[index].topics {
            let subscribers = self.subscribers_by_load.get_mut(topic).expect("every subscribed topic is indexed");
            subscribers.remove(&(old_load, index));
            subscribers.insert((new_load, index));
        }
    }

    /// Step 3's next move, if any: see the module docs for the choice.
    fn best_move(&self) -> Option<Move> {
        let &(least_load, _) = self.by_load.first()?;
        for &(giver_load, Reverse(giver)) in self.by_load.iter().rev() {
            if giver_load < least_load + 2 {
                return None;
            }
            if let Some(step) = self.move_from(giver, giver_load) {
                return Some(step);
            }
        }
        None
    }

    /// The move that helps most out of member `giver` (loaded `giver_load`), if one
    /// lowers the imbalance by two or more.
    fn move_from(&self, giver: usize, giver_load: usize) -> Option<Move> {
        let mut best: Option<(usize, usize, &TopicPartition)> = None;
        let mut previous_topic: Option<&str> = None;
        for partition in &self.owned[giver] {
            if previous_topic == Some(partition.topic.as_str()) {
                continue;
            }
            previous_topic = Some(partition.topic.as_str());
            let Some((receiver_load, receiver)) = self.least_loaded_subscriber(&partition.topic) else { continue };
            let improves = receiver_load + 2 <= giver_load;
            if improves && best.is_none_or(|(best_load, _, _)| receiver_load < best_load) {
                best = Some((receiver_load, receiver, partition));
            }
        }
        best.map(|(_, receiver, partition)| Move { giver, receiver, partition: partition.clone() })
    }
}
