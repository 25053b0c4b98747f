"""Consumer groups from Python: members in separate processes split the
partitions, rebalance callbacks, the admin view of groups and lag, and member
processes that join, leave and die while records arrive."""

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import weir

MEMBER = """
import json, pathlib, sys, time, weir
broker, name, meeting = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
events = []
consumer = weir.Consumer(broker, group_id="split", auto_offset_reset="earliest", session_timeout_ms=6000)
consumer.subscribe(["work"], on_assign=lambda c, p: events.append(["assigned", sorted(p)]),
                   on_revoke=lambda c, p: events.append(["revoked", sorted(p)]))
seen = {}
report = None
deadline = time.monotonic() + 40
while time.monotonic() < deadline:
    for message in consumer.poll_batch(0.2):
        seen.setdefault(message.partition, []).append(message.offset)
    owned = sorted(p for _, p in consumer.assignment())
    # done once this member owns half the partitions and has read them to the end
    if report is None and len(owned) == 2 and all(consumer.position("work", p) == 50 for p in owned):
        consumer.commit()
        report = {"owned": owned, "seen": seen, "events": list(events)}
        (meeting / name).touch()
    if report is not None and len(list(meeting.iterdir())) == 2:
        break  # both done: leave together
def from_callbacks():
    assigned = set()
    for kind, partitions in events:
        partitions = {p for _, p in partitions}
        assigned = assigned | partitions if kind == "assigned" else assigned - partitions
    return sorted(assigned)
if report is not None:
    # The core applies an assignment in the background and queues its callback
    # for the next poll: wait (bounded) until the callbacks have caught up.
    settle_deadline = time.monotonic() + 30
    while from_callbacks() != sorted(p for _, p in consumer.assignment()) and time.monotonic() < settle_deadline:
        consumer.poll_batch(0.05)
    report["final"] = {"from_callbacks": from_callbacks(), "owned": sorted(p for _, p in consumer.assignment())}
consumer.close()
print(json.dumps(report))
"""


def test_members_in_separate_processes_split_the_partitions(broker, tmp_path):
    weir.Admin(broker).create_topics([weir.NewTopic("work", num_partitions=4)])
    with weir.Producer(broker) as producer:
        for i in range(200):
            producer.produce("work", f"job-{i}".encode(), partition=i % 4)
    meeting = tmp_path / "done"
    meeting.mkdir()
    members = [subprocess.Popen([sys.executable, "-c", MEMBER, broker, name, str(meeting)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for name in ("a", "b")]
    reports = []
    for member in members:
        out, err = member.communicate(timeout=90)
        assert member.returncode == 0, err
        reports.append(json.loads(out))
        assert reports[-1] is not None, "the member never owned two caught-up partitions"
    owned = [set(report["owned"]) for report in reports]
    assert owned[0] | owned[1] == {0, 1, 2, 3} and not owned[0] & owned[1], owned
    for partition in range(4):
        seen = set()
        for report in reports:
            seen |= set(report["seen"].get(str(partition), []))
        assert seen == set(range(50)), f"partition {partition}: every record read at least once"
    for report in reports:
        assert report["events"][0][0] == "assigned", "callbacks ran in poll"
        assert report["final"]["from_callbacks"] == report["final"]["owned"], "callbacks add up to the assignment"


def test_rebalance_callbacks_and_group_admin(broker):
    admin = weir.Admin(broker)
    admin.create_topics([weir.NewTopic("cb", num_partitions=2)])
    with weir.Producer(broker) as producer:
        for i in range(6):
            producer.produce("cb", b"x", partition=i % 2)
    calls = []
    first = weir.Consumer(broker, group_id="cbg", auto_offset_reset="earliest", enable_auto_commit=False)
    first.subscribe(["cb"], on_assign=lambda c, p: calls.append(("first", "assigned", sorted(p))),
                    on_revoke=lambda c, p: calls.append(("first", "revoked", sorted(p))))
    got = []
    deadline = time.monotonic() + 15
    while len(got) < 6 and time.monotonic() < deadline:
        got += first.poll_batch(0.2)
    assert len(got) == 6
    assert calls == [("first", "assigned", [("cb", 0), ("cb", 1)])]
    first.commit(offsets={("cb", 0): 3})

    second = weir.Consumer(broker, group_id="cbg", auto_offset_reset="earliest", enable_auto_commit=False)
    second.subscribe(["cb"])
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not (len(first.assignment()) == 1 and len(second.assignment()) == 1):
        first.poll_batch(0.1)
        second.poll_batch(0.1)
    first.poll_batch(0.1)
    assert len(first.assignment()) == 1 and len(second.assignment()) == 1
    assert calls[1][:2] == ("first", "revoked") and len(calls[1][2]) == 1

    [listing] = [g for g in admin.list_groups() if g.group_id == "cbg"]
    assert listing.member_count == 2
    description = admin.describe_group("cbg")
    assert len(description.members) == 2
    assert sorted(p for m in description.members for p in m.assigned) == [("cb", 0), ("cb", 1)]
    lag = {row.partition: row for row in admin.group_lag("cbg")}
    assert (lag[0].committed, lag[0].log_end_offset, lag[0].lag) == (3, 3, 0)
    assert lag[1].committed is None and lag[1].log_end_offset == 3

    first.close()
    second.close()
    admin.reset_offsets("cbg", {("cb", 1): 1})
    assert {row.partition: row.committed for row in admin.group_lag("cbg")} == {0: 3, 1: 1}
    admin.delete_groups(["cbg"])
    assert "cbg" not in [g.group_id for g in admin.list_groups()]


CHURN_MEMBER = """
import signal, sys, weir
stopping = []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
consumer = weir.Consumer(sys.argv[1], group_id="churn", auto_offset_reset="earliest", session_timeout_ms=6000,
                         auto_commit_interval_ms=200)
consumer.subscribe(["churn"])
print("joined", flush=True)
while not stopping:
    message = consumer.poll(0.05)  # one record at a time: what `for m in consumer` does
    if message is not None:
        print(message.partition, message.offset, flush=True)
consumer.close()
print("closed", flush=True)
"""


def test_churning_member_processes_lose_nothing_and_duplicate_only_what_a_killed_one_held(broker):
    """Members in their own processes join, leave (SIGTERM: close) and die
    (SIGKILL) on a seeded schedule while records are produced: every record is
    delivered, and twice only if a killed member printed it."""
    seed = int(os.environ.get("WEIR_CHURN_SEED", "7"))
    rng = random.Random(seed)
    weir.Admin(broker).create_topics([weir.NewTopic("churn", num_partitions=6)])
    deliveries = []  # (member, partition, offset)
    lock = threading.Lock()
    members, killed, schedule = {}, set(), []

    def join(number):
        process = subprocess.Popen([sys.executable, "-c", CHURN_MEMBER, broker], stdout=subprocess.PIPE, text=True)
        assert process.stdout.readline().strip() == "joined"

        def read():
            for line in process.stdout:
                if line.strip() != "closed":
                    partition, offset = map(int, line.split())
                    with lock:
                        deliveries.append((number, partition, offset))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        members[number] = (process, reader)
        schedule.append(f"join {number}")

    def stop(number, how):
        process, reader = members.pop(number)
        process.send_signal(how)
        process.wait(timeout=120)
        reader.join(timeout=120)
        schedule.append(("leave" if how == signal.SIGTERM else "kill") + f" {number}")
        if how == signal.SIGKILL:
            killed.add(number)

    def distinct():
        with lock:
            return {(partition, offset) for _, partition, offset in deliveries}

    def wait_for(what, condition, seconds=120):
        deadline = time.monotonic() + seconds
        while not condition():
            assert time.monotonic() < deadline, f"seed {seed}: {what} ({', '.join(schedule)})"
            time.sleep(0.02)

    produced = set()
    next_number = 0
    with weir.Producer(broker) as producer:
        for step in range(8):
            keys = [f"key-{rng.randrange(1000)}".encode() for _ in range(100)]
            values = [f"{step}-{i}".encode() for i in range(100)]
            produced |= {(m.partition, m.offset) for m in producer.produce_many("churn", values, keys=keys).results()}
            roll = rng.randrange(10)
            before = len(distinct())
            if not members or (len(members) < 3 and roll < 5):
                join(next_number)
                next_number += 1
            elif roll < 8:
                stop(rng.choice(sorted(members)), signal.SIGTERM)
            else:
                stop(rng.choice(sorted(members)), signal.SIGKILL)
            if not members:
                join(next_number)
                next_number += 1
            wait_for("progress", lambda: len(distinct()) > before or len(distinct()) == len(produced))
    wait_for("every record delivered", lambda: len(distinct()) == len(produced))
    for number in sorted(members):
        stop(number, signal.SIGTERM)
    by_record = {}
    for number, partition, offset in deliveries:
        by_record.setdefault((partition, offset), []).append(number)
    assert produced <= set(by_record), f"seed {seed}: records lost ({', '.join(schedule)})"
    twice = {record: who for record, who in by_record.items() if len(who) > 1}
    innocent = {record: who for record, who in twice.items() if not killed & set(who)}
    assert not innocent, f"seed {seed}: delivered twice without a kill: {sorted(innocent.items())[:5]} ({schedule})"
