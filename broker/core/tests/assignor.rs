//! The consumer-group assignors (`broker_core::group::assignor`) through their public
//! API: Kafka's documented range and round-robin examples with exact outputs, and
//! seeded random groups checked against the properties every assignment must have.
//!
//! Properties, for all three assignors and every random group:
//! - completeness: every partition of every subscribed, existing topic is assigned
//!   exactly once, nothing else is assigned, and every member id has an entry;
//! - eligibility: a member only gets partitions of topics it subscribes to;
//! - determinism: shuffling the members slice does not change the output;
//! - balance when every member shares one subscription: round-robin and
//!   cooperative-sticky loads differ by at most one; range is balanced per topic
//!   only (Kafka's range gives the first members every topic's extra partition,
//!   pinned by `range_matches_kafkas_documented_example`);
//! - static members: a restart under a new member id keeps the same partitions.
//!
//! And for cooperative-sticky:
//! - idempotence: feeding an output back as `current` returns it unchanged;
//! - locally balanced: no member owns a partition that a subscriber loaded two or
//!   more less could take (the best effort for mixed subscriptions);
//! - minimal movement with one shared subscription: the number of kept partitions
//!   that change owner equals the optimum computed independently here;
//! - adding a member to a balanced group moves partitions only to the new member,
//!   between floor(P/(n+1)) and ceil(P/(n+1)) of them — the new member must end with
//!   one of those loads to be balanced, so no assignor can move fewer;
//! - removing a member moves only that member's partitions.
//!
//! The random groups come from seeded `StdRng`s (proptest is not a dependency of
//! this crate). A failure names its seed; `WEIR_ASSIGNOR_SEED=n` reruns one seed and
//! `WEIR_ASSIGNOR_SEEDS=n` runs more (default 256).

use std::collections::{BTreeMap, BTreeSet};

use broker_core::group::assignor::{assign, Assignment, AssignorKind, MemberSpec, TopicPartition};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const DEFAULT_SEED_COUNT: u64 = 256;
const TOPIC_NAMES: [&str; 4] = ["orders", "payments", "refunds", "audit"];
/// Subscribed by some members but never in `partition_counts`.
const MISSING_TOPIC: &str = "deleted";

fn member(member_id: &str, topics: &[&str]) -> MemberSpec {
    MemberSpec {
        member_id: member_id.to_owned(),
        instance_id: None,
        subscribed_topics: topics.iter().map(|topic| topic.to_string()).collect(),
        current: BTreeSet::new(),
    }
}

fn counts(topics: &[(&str, u32)]) -> BTreeMap<String, u32> {
    topics.iter().map(|&(topic, count)| (topic.to_owned(), count)).collect()
}

/// Parses "t0p1" style names into partitions, for readable expectations.
fn partitions(names: &[&str]) -> BTreeSet<TopicPartition> {
    names
        .iter()
        .map(|name| {
            let (topic, partition) = name.split_once('p').expect("name like t0p1");
            TopicPartition::new(topic, partition.parse().expect("partition number"))
        })
        .collect()
}

fn expected(entries: &[(&str, &[&str])]) -> Assignment {
    entries.iter().map(|&(member_id, names)| (member_id.to_owned(), partitions(names))).collect()
}

#[test]
fn range_matches_kafkas_documented_example() {
    // RangeAssignor javadoc: two consumers, two topics of three partitions each.
    let members = [member("C1", &["t0", "t1"]), member("C0", &["t0", "t1"])];
    let assignment = assign(AssignorKind::Range, &members, &counts(&[("t0", 3), ("t1", 3)]));
    assert_eq!(assignment, expected(&[("C0", &["t0p0", "t0p1", "t1p0", "t1p1"]), ("C1", &["t0p2", "t1p2"])]));
}

#[test]
fn round_robin_matches_kafkas_documented_examples() {
    // RoundRobinAssignor javadoc, same subscriptions.
    let members = [member("C0", &["t0", "t1"]), member("C1", &["t0", "t1"])];
    let assignment = assign(AssignorKind::RoundRobin, &members, &counts(&[("t0", 3), ("t1", 3)]));
    assert_eq!(assignment, expected(&[("C0", &["t0p0", "t0p2", "t1p1"]), ("C1", &["t0p1", "t1p0", "t1p2"])]));
    // RoundRobinAssignor javadoc, different subscriptions.
    let members = [member("C2", &["t0", "t1", "t2"]), member("C0", &["t0"]), member("C1", &["t0", "t1"])];
    let assignment = assign(AssignorKind::RoundRobin, &members, &counts(&[("t0", 1), ("t1", 2), ("t2", 3)]));
    assert_eq!(
        assignment,
        expected(&[("C0", &["t0p0"]), ("C1", &["t1p0"]), ("C2", &["t1p1", "t2p0", "t2p1", "t2p2"])])
    );
}

#[test]
fn three_members_two_topics_of_three_partitions() {
    let members = [member("C2", &["t0", "t1"]), member("C1", &["t0", "t1"]), member("C0", &["t0", "t1"])];
    let partition_counts = counts(&[("t0", 3), ("t1", 3)]);
    let one_of_each = expected(&[("C0", &["t0p0", "t1p0"]), ("C1", &["t0p1", "t1p1"]), ("C2", &["t0p2", "t1p2"])]);
    for kind in [AssignorKind::Range, AssignorKind::RoundRobin] {
        assert_eq!(assign(kind, &members, &partition_counts), one_of_each, "{}", kind.name());
    }
    // Seven partitions over three: 7 % 3 = 1 extra, for the first member.
    let members = [member("C2", &["t0"]), member("C1", &["t0"]), member("C0", &["t0"])];
    let assignment = assign(AssignorKind::Range, &members, &counts(&[("t0", 7)]));
    assert_eq!(
        assignment,
        expected(&[("C0", &["t0p0", "t0p1", "t0p2"]), ("C1", &["t0p3", "t0p4"]), ("C2", &["t0p5", "t0p6"])])
    );
    let assignment = assign(AssignorKind::RoundRobin, &members, &counts(&[("t0", 7)]));
    assert_eq!(
        assignment,
        expected(&[("C0", &["t0p0", "t0p3", "t0p6"]), ("C1", &["t0p1", "t0p4"]), ("C2", &["t0p2", "t0p5"])])
    );
}

#[test]
fn static_members_are_ordered_by_instance_id_and_unknown_topics_are_ignored() {
    let mut zed = member("zed", &["t0", "gone"]);
    zed.instance_id = Some("a-instance".to_owned());
    let members = [member("bob", &["t0"]), zed, member("nobody", &["gone"])];
    let assignment = assign(AssignorKind::Range, &members, &counts(&[("t0", 3)]));
    assert_eq!(assignment, expected(&[("zed", &["t0p0", "t0p1"]), ("bob", &["t0p2"]), ("nobody", &[])]));
}

#[test]
fn cooperative_sticky_keeps_owners_and_resolves_double_claims() {
    let mut first = member("C0", &["t0"]);
    first.current = partitions(&["t0p0", "t0p1", "t0p2", "t0p3", "t0p9", "t1p0"]);
    let mut second = member("C1", &["t0"]);
    second.current = partitions(&["t0p3"]);
    let third = member("C2", &["t0"]);
    let assignment = assign(AssignorKind::CooperativeSticky, &[third, second, first], &counts(&[("t0", 6), ("t1", 1)]));
    // t0p9 no longer exists, t1 is not subscribed, t0p3 stays with C0 (first in
    // member order); unowned t0p4 and t0p5 go to the least loaded (C1, then C2);
    // then C0 (4) gives its lowest partition to C1 (1, first in member order), and
    // (3) its next to C2 (1): loads 2/2/2.
    assert_eq!(
        assignment,
        expected(&[("C0", &["t0p2", "t0p3"]), ("C1", &["t0p0", "t0p4"]), ("C2", &["t0p1", "t0p5"])])
    );
}

#[test]
fn names_round_trip() {
    for kind in AssignorKind::ALL {
        assert_eq!(AssignorKind::parse(kind.name()), Some(kind));
    }
    assert_eq!(AssignorKind::ALL.map(AssignorKind::name), ["range", "roundrobin", "cooperative-sticky"]);
    assert_eq!(AssignorKind::parse("sticky"), None);
    assert_eq!(AssignorKind::parse("Range"), None);
}

#[test]
fn random_groups_have_every_property() {
    for seed in seeds() {
        let mut rng = StdRng::seed_from_u64(seed);
        let group = RandomGroup::generate(&mut rng);
        for kind in AssignorKind::ALL {
            let context = format!("seed {seed} ({}), rerun with WEIR_ASSIGNOR_SEED={seed}: {group:?}", kind.name());
            let assignment = assign(kind, &group.members, &group.partition_counts);
            check_complete_and_eligible(&group, &assignment, &context);
            check_deterministic(kind, &group, &assignment, &mut rng, &context);
            check_static_restart(kind, &group, &assignment, &context);
            if group.homogeneous {
                check_balanced(kind, &group, &assignment, &context);
            }
            if kind == AssignorKind::CooperativeSticky {
                check_sticky(&group, &assignment, &context);
            }
        }
    }
}

#[test]
fn cooperative_sticky_moves_little_when_a_member_joins_or_leaves() {
    for seed in seeds() {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut group = RandomGroup::generate_homogeneous(&mut rng);
        if group.members.is_empty() {
            continue;
        }
        let context = format!("seed {seed}, rerun with WEIR_ASSIGNOR_SEED={seed}: {group:?}");
        // A balanced previous assignment, from a fresh sticky or a round-robin run.
        let source = *[AssignorKind::CooperativeSticky, AssignorKind::RoundRobin].choose(&mut rng).expect("two");
        let previous = assign(source, &group.members, &group.partition_counts);
        group.set_current(&previous);
        check_join(&group, &previous, &mut rng, &context);
        check_leave(&group, &previous, &mut rng, &context);
    }
}

fn seeds() -> std::ops::Range<u64> {
    let read = |name: &str| std::env::var(name).ok().map(|value| value.parse::<u64>().expect("a number"));
    match read("WEIR_ASSIGNOR_SEED") {
        Some(seed) => seed..seed + 1,
        None => 0..read("WEIR_ASSIGNOR_SEEDS").unwrap_or(DEFAULT_SEED_COUNT),
    }
}

/// A random group: up to 7 members (some static), up to 4 topics of 0..=12
/// partitions, subscriptions shared or mixed (some to a missing topic), and
/// `current` ownership with stale, foreign and doubly claimed partitions.
#[derive(Debug)]
struct RandomGroup {
    members: Vec<MemberSpec>,
    partition_counts: BTreeMap<String, u32>,
    /// Every member subscribes to the same topics.
    homogeneous: bool,
    /// No partition is in two members' `current`.
    claims_disjoint: bool,
}

impl RandomGroup {
    fn generate(rng: &mut StdRng) -> RandomGroup {
        let homogeneous = rng.gen_bool(0.5);
        let claims_disjoint = rng.gen_bool(0.5);
        let mut group = RandomGroup::skeleton(rng, homogeneous);
        group.claims_disjoint = claims_disjoint;
        let mut owner_of = BTreeMap::new();
        for (topic, &count) in &group.partition_counts {
            // One past the end: a partition that no longer exists.
            for partition in 0..=count {
                owner_of.insert(TopicPartition::new(topic.clone(), partition), rng.gen_range(0..=group.members.len()));
            }
        }
        for (index, member) in group.members.iter_mut().enumerate() {
            for (partition, &owner) in &owner_of {
                let claims = if claims_disjoint { owner == index } else { rng.gen_bool(0.3) };
                if claims {
                    member.current.insert(partition.clone());
                }
            }
            if rng.gen_bool(0.2) {
                member.current.insert(TopicPartition::new(MISSING_TOPIC, 0));
            }
        }
        group
    }

    fn generate_homogeneous(rng: &mut StdRng) -> RandomGroup {
        RandomGroup::skeleton(rng, true)
    }

    /// Members and topics, with empty `current`.
    fn skeleton(rng: &mut StdRng, homogeneous: bool) -> RandomGroup {
        let topic_count = rng.gen_range(1..=TOPIC_NAMES.len());
        let partition_counts: BTreeMap<String, u32> =
            TOPIC_NAMES[..topic_count].iter().map(|&topic| (topic.to_owned(), rng.gen_range(0..=12))).collect();
        let mut all_topics: Vec<&str> = TOPIC_NAMES[..topic_count].to_vec();
        all_topics.push(MISSING_TOPIC);
        let shared = random_subscription(rng, &all_topics);
        let member_count = rng.gen_range(0..=7);
        let mut members = Vec::with_capacity(member_count);
        for index in 0..member_count {
            let topics = if homogeneous { shared.clone() } else { random_subscription(rng, &all_topics) };
            let mut spec = member(&format!("member-{}", rng.gen_range(0..1_000_000)), &topics);
            spec.member_id.push_str(&format!("-{index}"));
            if rng.gen_bool(0.3) {
                spec.instance_id = Some(format!("instance-{}-{index}", rng.gen_range(0..1000)));
            }
            members.push(spec);
        }
        RandomGroup { members, partition_counts, homogeneous, claims_disjoint: true }
    }

    fn set_current(&mut self, assignment: &Assignment) {
        for member in &mut self.members {
            member.current = assignment[&member.member_id].clone();
        }
    }

    /// Every partition that must be assigned, and who may get it.
    fn assignable(&self) -> BTreeMap<TopicPartition, BTreeSet<&str>> {
        let mut assignable: BTreeMap<TopicPartition, BTreeSet<&str>> = BTreeMap::new();
        for member in &self.members {
            for topic in &member.subscribed_topics {
                let Some(&count) = self.partition_counts.get(topic) else { continue };
                for partition in 0..count {
                    assignable
                        .entry(TopicPartition::new(topic.clone(), partition))
                        .or_default()
                        .insert(&member.member_id);
                }
            }
        }
        assignable
    }
}

/// A random, unsorted subscription with a duplicate now and then.
fn random_subscription<'t>(rng: &mut StdRng, topics: &[&'t str]) -> Vec<&'t str> {
    let mut subscription: Vec<&str> = topics.iter().copied().filter(|_| rng.gen_bool(0.6)).collect();
    if let (true, Some(&first)) = (rng.gen_bool(0.2), subscription.first()) {
        subscription.push(first);
    }
    subscription.shuffle(rng);
    subscription
}

fn check_complete_and_eligible(group: &RandomGroup, assignment: &Assignment, context: &str) {
    let member_ids: BTreeSet<&String> = group.members.iter().map(|member| &member.member_id).collect();
    assert_eq!(assignment.keys().collect::<BTreeSet<_>>(), member_ids, "one entry per member: {context}");
    let mut owners: BTreeMap<&TopicPartition, Vec<&str>> = BTreeMap::new();
    for (member_id, owned) in assignment {
        for partition in owned {
            owners.entry(partition).or_default().push(member_id);
        }
    }
    let assignable = group.assignable();
    assert_eq!(owners.keys().copied().collect::<BTreeSet<_>>(), assignable.keys().collect(), "coverage: {context}");
    for (partition, owner_ids) in owners {
        assert_eq!(owner_ids.len(), 1, "{partition:?} owned by {owner_ids:?}: {context}");
        assert!(assignable[partition].contains(owner_ids[0]), "{partition:?} to non-subscriber: {context}");
    }
}

fn check_deterministic(
    kind: AssignorKind,
    group: &RandomGroup,
    assignment: &Assignment,
    rng: &mut StdRng,
    context: &str,
) {
    let mut shuffled = group.members.clone();
    shuffled.shuffle(rng);
    assert_eq!(&assign(kind, &shuffled, &group.partition_counts), assignment, "after a shuffle: {context}");
}

/// A static member that restarts under a new member id (keeping what it owned, as
/// the coordinator hands it over) gets the same partitions; nobody else changes.
fn check_static_restart(kind: AssignorKind, group: &RandomGroup, assignment: &Assignment, context: &str) {
    let Some(index) = group.members.iter().position(|member| member.instance_id.is_some()) else { return };
    let mut members = group.members.clone();
    let old_member_id = std::mem::replace(&mut members[index].member_id, "restarted".to_owned());
    if kind == AssignorKind::CooperativeSticky {
        for member in &mut members {
            let member_id = if member.member_id == "restarted" { &old_member_id } else { &member.member_id };
            member.current = assignment[member_id].clone();
        }
    }
    let mut restarted = assign(kind, &members, &group.partition_counts);
    let owned = restarted.remove("restarted").expect("an entry for the new member id");
    restarted.insert(old_member_id, owned);
    assert_eq!(&restarted, assignment, "static member restart: {context}");
}

fn check_balanced(kind: AssignorKind, group: &RandomGroup, assignment: &Assignment, context: &str) {
    let spread = |loads: Vec<usize>| loads.iter().max().unwrap_or(&0) - loads.iter().min().unwrap_or(&0);
    if kind == AssignorKind::Range {
        for topic in group.partition_counts.keys() {
            let loads = assignment.values().map(|owned| owned.iter().filter(|tp| &tp.topic == topic).count());
            assert!(spread(loads.collect()) <= 1, "range unbalanced on {topic}: {assignment:?} {context}");
        }
    } else {
        let loads = assignment.values().map(BTreeSet::len).collect();
        assert!(spread(loads) <= 1, "unbalanced: {assignment:?} {context}");
    }
}

fn check_sticky(group: &RandomGroup, assignment: &Assignment, context: &str) {
    let mut again = group.members.clone();
    for member in &mut again {
        member.current = assignment[&member.member_id].clone();
    }
    let repeated = assign(AssignorKind::CooperativeSticky, &again, &group.partition_counts);
    assert_eq!(&repeated, assignment, "not idempotent: {context}");
    check_locally_balanced(group, assignment, context);
    if group.homogeneous && group.claims_disjoint {
        check_minimal_movement(group, assignment, context);
    }
}

fn check_locally_balanced(group: &RandomGroup, assignment: &Assignment, context: &str) {
    let assignable = group.assignable();
    for (giver, owned) in assignment {
        for partition in owned {
            for receiver in &assignable[partition] {
                let (giver_load, receiver_load) = (owned.len(), assignment[*receiver].len());
                assert!(
                    receiver_load + 2 > giver_load,
                    "{giver} ({giver_load}) could give {partition:?} to {receiver} ({receiver_load}): {context}"
                );
            }
        }
    }
}

/// With one shared subscription and no double claims: kept partitions that changed
/// owner == the optimum. Each member keeps k_i valid partitions; a balanced result
/// gives `rest` members q + 1 and the others q (q, rest = P / n, P % n), and the
/// fewest revocations give the q + 1 slots to the members keeping the most.
fn check_minimal_movement(group: &RandomGroup, assignment: &Assignment, context: &str) {
    let assignable = group.assignable();
    let mut kept_counts = Vec::new();
    let mut revoked_count = 0;
    for member in &group.members {
        let kept: Vec<_> = member.current.iter().filter(|partition| assignable.contains_key(*partition)).collect();
        revoked_count += kept.iter().filter(|partition| !assignment[&member.member_id].contains(**partition)).count();
        kept_counts.push(kept.len());
    }
    kept_counts.sort_unstable_by(|left, right| right.cmp(left));
    let member_count = group.members.len().max(1);
    let (quota, rest) = (assignable.len() / member_count, assignable.len() % member_count);
    let optimum: usize =
        kept_counts.iter().enumerate().map(|(rank, &kept)| kept.saturating_sub(quota + usize::from(rank < rest))).sum();
    assert_eq!(revoked_count, optimum, "moved more than needed: {assignment:?} {context}");
}

fn check_join(group: &RandomGroup, previous: &Assignment, rng: &mut StdRng, context: &str) {
    let mut joiner = member(&format!("joiner-{}", rng.gen_range(0..1000)), &[]);
    joiner.subscribed_topics = group.members[0].subscribed_topics.clone();
    let joiner_id = joiner.member_id.clone();
    let mut members = group.members.clone();
    members.insert(rng.gen_range(0..=members.len()), joiner);
    let next = assign(AssignorKind::CooperativeSticky, &members, &group.partition_counts);
    for (member_id, owned) in previous {
        assert!(next[member_id].is_subset(owned), "{member_id} gained on a join: {next:?} {context}");
    }
    let total = group.assignable().len();
    let (fewest, most) = (total / members.len(), total.div_ceil(members.len()));
    let moved = next[&joiner_id].len();
    assert!((fewest..=most).contains(&moved), "join moved {moved}, expected {fewest}..={most}: {next:?} {context}");
}

fn check_leave(group: &RandomGroup, previous: &Assignment, rng: &mut StdRng, context: &str) {
    if group.members.len() < 2 {
        return; // The last member leaving leaves nobody to move partitions to.
    }
    let mut members = group.members.clone();
    let leaver = members.remove(rng.gen_range(0..members.len()));
    let next = assign(AssignorKind::CooperativeSticky, &members, &group.partition_counts);
    let mut moved = BTreeSet::new();
    for member in &members {
        let owned = &previous[&member.member_id];
        assert!(owned.is_subset(&next[&member.member_id]), "{} lost on a leave: {next:?} {context}", member.member_id);
        moved.extend(next[&member.member_id].difference(owned).cloned());
    }
    assert_eq!(moved, previous[&leaver.member_id], "only the leaver's partitions move: {context}");
}
