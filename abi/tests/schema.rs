//! The checked-in Rust for `schema/weir.capnp` must be what capnpc generates from it
//! now. Needs the `capnp` compiler (Debian: `capnproto`), which CI installs; without
//! it the test says so and fails, unless `WEIR_SKIP_CAPNP=1` is set for machines
//! that cannot install it. `WEIR_BLESS=1` rewrites the checked-in file.

#![allow(clippy::unwrap_used)] // test assertions

use std::path::Path;

#[test]
fn generated_rust_is_fresh() {
    let abi = Path::new(env!("CARGO_MANIFEST_DIR"));
    let checked_in = abi.join("src/weir_capnp.rs");
    if std::process::Command::new("capnp").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("WEIR_SKIP_CAPNP").is_some(),
            "the capnp compiler is not installed (apt-get install capnproto libcapnp-dev), \
             so the freshness of {} cannot be checked; set WEIR_SKIP_CAPNP=1 to skip knowingly",
            checked_in.display()
        );
        return;
    }
    let out = tempfile::tempdir().expect("temp dir");
    capnpc::CompilerCommand::new()
        .src_prefix(abi.join("schema"))
        .file(abi.join("schema/weir.capnp"))
        .output_path(out.path())
        .run()
        .expect("capnp compile");
    let generated = std::fs::read_to_string(out.path().join("weir_capnp.rs")).expect("generated file");
    if std::env::var_os("WEIR_BLESS").is_some() {
        std::fs::write(&checked_in, &generated).expect("write generated file");
        return;
    }
    let current = std::fs::read_to_string(&checked_in).unwrap_or_default();
    assert!(
        current == generated,
        "{} is stale: run `WEIR_BLESS=1 cargo test -p abi --test schema` and commit the result",
        checked_in.display()
    );
}

/// The generated code is usable: a produce request survives a serialization round
/// trip with its batch bytes intact, and the reader enforces a traversal limit.
#[test]
fn produce_request_round_trips_and_reads_are_bounded() {
    use abi::weir_capnp::{produce_request, Acks};
    let batch = abi::BatchBuilder::new(1).encode();
    let mut message = capnp::message::Builder::new_default();
    let mut request = message.init_root::<produce_request::Builder<'_>>();
    request.set_topic("orders");
    request.set_partition(3);
    request.set_acks(Acks::All);
    request.set_timeout_ms(30_000);
    request.set_batches(&batch);
    let bytes = capnp::serialize::write_message_to_words(&message);

    let options = *capnp::message::ReaderOptions::new().traversal_limit_in_words(Some(1024)).nesting_limit(16);
    let reader = capnp::serialize::read_message_from_flat_slice(&mut &bytes[..], options).expect("read");
    let request = reader.get_root::<produce_request::Reader<'_>>().expect("root");
    assert_eq!(request.get_topic().unwrap().to_str().unwrap(), "orders");
    assert_eq!((request.get_partition(), request.get_acks().unwrap()), (3, Acks::All));
    assert_eq!(request.get_batches().unwrap(), &batch[..]);

    let tight = *capnp::message::ReaderOptions::new().traversal_limit_in_words(Some(4));
    let rejected = capnp::serialize::read_message_from_flat_slice(&mut &bytes[..], tight)
        .and_then(|reader| reader.get_root::<produce_request::Reader<'_>>()?.get_batches().map(<[u8]>::len));
    assert!(rejected.is_err(), "a message past the traversal limit is an error, not a panic");
}
