//! `sdk-go/include/weir.h` is what cbindgen writes from this crate today:
//! the Go SDK compiles against the checked-in header, so a change to the ABI
//! without regenerating it fails here. `WEIR_BLESS=1` rewrites it.

use std::path::Path;

#[test]
fn the_checked_in_header_is_fresh() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml parses");
    let bindings = cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen reads the crate");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).expect("the header is UTF-8");
    let path = crate_dir.join("../include/weir.h");
    if std::env::var_os("WEIR_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write the header");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is stale: regenerate it with `WEIR_BLESS=1 cargo test -p weir-ffi --test header` and commit it",
        path.display()
    );
}
