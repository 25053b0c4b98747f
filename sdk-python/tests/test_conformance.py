"""The conformance suite every SDK runs (conformance/vectors.json, written from
the Rust client core by client/tests/conformance.rs): the same vectors and
scenarios as the Rust and Node suites, through the Python SDK."""

import json
import os
import pathlib

import weir

ROOT = pathlib.Path(__file__).resolve().parents[2]
VECTORS = json.loads((ROOT / "conformance" / "vectors.json").read_text())
PLUGINS = pathlib.Path(os.environ.get("WEIR_PLUGIN_DIR", ROOT / "target" / "plugins" / "wasm32-wasip2" / "release"))


def unhex(text):
    return None if text is None else bytes.fromhex(text)


def test_keys_land_on_kafkas_murmur2_partitions():
    for vector in VECTORS["murmur2"] + VECTORS["kafka_murmur2"]:
        assert weir.partition_for_key(unhex(vector["key"]), vector["partitions"]) == vector["partition"], vector


def test_every_error_code_is_an_exception_class_with_its_retriability():
    for entry in VECTORS["errors"]:
        name = entry["name"] if entry["name"].endswith("Error") else entry["name"] + "Error"
        error_class = getattr(weir, name)
        assert issubclass(error_class, weir.WeirError)
        assert error_class.retriable is entry["retriable"], name
        raised = error_class(entry["code"], "message")
        assert raised.code == entry["code"]


def test_records_round_trip_with_their_keys_values_headers_and_partitions(broker):
    trip = VECTORS["round_trip"]
    admin = weir.Admin(broker)
    admin.create_topics([weir.NewTopic(trip["topic"], num_partitions=trip["partitions"])])
    with weir.Producer(broker) as producer:
        for index, record in enumerate(trip["records"]):
            headers = [(key, unhex(value)) for key, value in record["headers"]]
            landed = producer.produce(trip["topic"], unhex(record["value"]), key=unhex(record["key"]),
                                      headers=headers, partition=record["partition"]).result(timeout=60)
            assert landed.partition == record["expected_partition"], index
    with weir.Consumer(broker) as consumer:
        consumer.assign([(trip["topic"], partition) for partition in range(trip["partitions"])])
        consumer.seek_to_beginning()
        read = []
        for _ in range(120):  # a generous deadline, in polls of a second
            if len(read) >= len(trip["records"]):
                break
            read.extend(consumer.poll_batch(1.0))
    read.sort(key=lambda message: (message.partition, message.offset))
    expected = sorted(trip["records"], key=lambda record: record["expected_partition"])
    assert len(read) == len(expected)
    for got, want in zip(read, expected):
        assert got.partition == want["expected_partition"]
        assert got.key == unhex(want["key"])
        assert got.value == unhex(want["value"])
        assert list(got.headers) == [(key, unhex(value)) for key, value in want["headers"]]


def test_a_partitioner_plugin_places_records_as_from_rust(broker):
    placed = VECTORS["partitioner"]
    admin = weir.Admin(broker)
    admin.upload_plugin(placed["plugin"], str(PLUGINS / f"{placed['plugin']}.wasm"), hook="partitioner")
    admin.create_topics([weir.NewTopic(placed["topic"], num_partitions=placed["partitions"])])
    admin.set_partitioner(placed["topic"], placed["plugin"], placed["config"])
    with weir.Producer(broker) as producer:
        for placement in placed["placements"]:
            landed = producer.produce(placed["topic"], b"v", key=placement["key"].encode()).result(timeout=60)
            assert landed.partition == placement["partition"], placement["key"]
