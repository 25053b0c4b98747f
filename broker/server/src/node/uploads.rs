//! Plugin uploads in pieces: a component bigger than one request
//! (`[limits] request_bytes_max`) arrives as chunks appended in order, then is
//! checked against the size and SHA-256 announced at the start and handed to
//! [`Node::upload_plugin`] whole.
//!
//! Bounds: one upload is at most `[plugins] upload_bytes_max`; the uploads in
//! progress together announce at most twice that; an upload with no chunk for
//! [`IDLE_MS`] is forgotten. Memory grows with the chunks received, never with
//! a size only announced.

use std::collections::BTreeMap;

use abi::ErrorCode;
use sha2::{Digest, Sha256};

use crate::error::ApiError;

/// An upload with no chunk for this long is dropped.
pub const IDLE_MS: i64 = 60_000;

/// Bytes one chunk may carry: well within the default request size.
pub const CHUNK_BYTES_MAX: u32 = 4 << 20;

/// What `begin` was told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Announced {
    pub name: String,
    pub hook: String,
    pub size_bytes: u64,
    /// Lowercase hex SHA-256.
    pub digest: String,
}

struct Pending {
    announced: Announced,
    bytes: Vec<u8>,
    /// Of the bytes so far: finishing only compares.
    hasher: Sha256,
    touched_ms: i64,
    /// Taken by `finish` and being uploaded: still counted, never idle.
    finishing: bool,
}

/// The uploads in progress on this broker.
pub struct PendingUploads {
    upload_bytes_max: u64,
    pending: BTreeMap<u64, Pending>,
}

impl std::fmt::Debug for PendingUploads {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("PendingUploads").field("in_progress", &self.pending.len()).finish()
    }
}

fn invalid(message: String) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, message)
}

impl PendingUploads {
    pub fn new(upload_bytes_max: usize) -> PendingUploads {
        PendingUploads { upload_bytes_max: upload_bytes_max as u64, pending: BTreeMap::new() }
    }

    /// Forgets uploads idle for [`IDLE_MS`] (never one being finished).
    fn prune(&mut self, now_ms: i64) {
        self.pending.retain(|_, pending| pending.finishing || now_ms - pending.touched_ms < IDLE_MS);
    }

    /// Starts an upload and answers its id (random: one client cannot guess
    /// another's).
    pub fn begin(&mut self, announced: Announced, now_ms: i64) -> Result<u64, ApiError> {
        self.prune(now_ms);
        if announced.size_bytes > self.upload_bytes_max {
            return Err(ApiError::new(
                ErrorCode::MessageTooLarge,
                format!(
                    "plugin {:?} is {} bytes, more than the broker's [plugins] upload_bytes_max ({})",
                    announced.name, announced.size_bytes, self.upload_bytes_max
                ),
            ));
        }
        if announced.digest.len() != 64
            || !announced.digest.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err(invalid(format!("{:?} is not a lowercase hex SHA-256", announced.digest)));
        }
        let in_progress: u64 = self.pending.values().map(|pending| pending.announced.size_bytes).sum();
        if in_progress + announced.size_bytes > 2 * self.upload_bytes_max {
            return Err(ApiError::new(
                ErrorCode::ResourceExhausted,
                format!(
                    "uploads in progress announce {in_progress} bytes; with this one they would pass twice \
                     [plugins] upload_bytes_max ({}): try again when they finish",
                    self.upload_bytes_max
                ),
            ));
        }
        let id = loop {
            let id = rand::random::<u64>();
            if id != 0 && !self.pending.contains_key(&id) {
                break id;
            }
        };
        let pending =
            Pending { announced, bytes: Vec::new(), hasher: Sha256::new(), touched_ms: now_ms, finishing: false };
        self.pending.insert(id, pending);
        Ok(id)
    }

    /// Appends a chunk, which must start where the bytes so far end.
    pub fn append(&mut self, id: u64, offset: u64, data: &[u8], now_ms: i64) -> Result<(), ApiError> {
        self.prune(now_ms);
        let pending = self.pending.get_mut(&id).filter(|pending| !pending.finishing).ok_or_else(|| unknown(id))?;
        let received = pending.bytes.len() as u64;
        if offset != received {
            return Err(invalid(format!("upload {id}: a chunk at offset {offset}, but {received} bytes came so far")));
        }
        if data.len() > CHUNK_BYTES_MAX as usize {
            return Err(invalid(format!("upload {id}: a chunk of {} bytes, more than {CHUNK_BYTES_MAX}", data.len())));
        }
        let announced = pending.announced.size_bytes;
        if received + data.len() as u64 > announced {
            return Err(invalid(format!("upload {id}: chunks pass the {announced} bytes announced")));
        }
        // Grows by doubling, never past what was announced.
        let wanted = (pending.bytes.len() + data.len()).max(2 * pending.bytes.capacity()).min(announced as usize);
        pending.bytes.reserve_exact(wanted.saturating_sub(pending.bytes.len()));
        pending.bytes.extend_from_slice(data);
        pending.hasher.update(data);
        pending.touched_ms = now_ms;
        Ok(())
    }

    /// Takes an upload's bytes if they are all there and hash to the announced
    /// digest; it stays counted (as in progress) until [`PendingUploads::done`].
    /// A refused upload is gone.
    pub fn finish(&mut self, id: u64, now_ms: i64) -> Result<(Announced, Vec<u8>), ApiError> {
        self.prune(now_ms);
        let pending = self.pending.get_mut(&id).filter(|pending| !pending.finishing).ok_or_else(|| unknown(id))?;
        let refused = if pending.bytes.len() as u64 != pending.announced.size_bytes {
            Some(invalid(format!(
                "upload {id}: {} of the {} bytes announced came",
                pending.bytes.len(),
                pending.announced.size_bytes
            )))
        } else {
            let digest: String =
                std::mem::take(&mut pending.hasher).finalize().iter().map(|byte| format!("{byte:02x}")).collect();
            (digest != pending.announced.digest).then(|| {
                invalid(format!(
                    "upload {id}: the bytes hash to {digest}, not the announced {}",
                    pending.announced.digest
                ))
            })
        };
        if let Some(error) = refused {
            self.pending.remove(&id);
            return Err(error);
        }
        pending.finishing = true;
        Ok((pending.announced.clone(), std::mem::take(&mut pending.bytes)))
    }

    /// Ends a finished upload (its registration is over, or abandoned).
    pub fn done(&mut self, id: u64) {
        self.pending.remove(&id);
    }
}

fn unknown(id: u64) -> ApiError {
    invalid(format!("no upload {id} in progress here (unknown, finished, or idle for more than {IDLE_MS} ms)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn announced(bytes: &[u8]) -> Announced {
        Announced {
            name: "p".to_owned(),
            hook: String::new(),
            size_bytes: bytes.len() as u64,
            digest: plugin_host::hex_sha256(bytes),
        }
    }

    #[test]
    fn chunks_in_order_make_the_announced_bytes() {
        let mut uploads = PendingUploads::new(1 << 20);
        let bytes: Vec<u8> = (0..100_000u32).map(|index| index as u8).collect();
        let id = uploads.begin(announced(&bytes), 0).unwrap();
        for (index, chunk) in bytes.chunks(30_000).enumerate() {
            uploads.append(id, (index * 30_000) as u64, chunk, 1).unwrap();
        }
        assert_eq!(uploads.finish(id, 1).unwrap().1, bytes);
        assert_eq!(uploads.finish(id, 1).unwrap_err().code, ErrorCode::InvalidRequest, "being finished");
        uploads.done(id);
        assert_eq!(uploads.append(id, 0, b"x", 1).unwrap_err().code, ErrorCode::InvalidRequest, "finished is gone");
    }

    #[test]
    fn bad_uploads_are_refused_with_what_was_wrong() {
        let mut uploads = PendingUploads::new(1 << 20);
        let bytes = vec![7u8; 1000];
        let too_big = Announced { size_bytes: 2 << 20, ..announced(&bytes) };
        let error = uploads.begin(too_big, 0).unwrap_err();
        assert_eq!(error.code, ErrorCode::MessageTooLarge);
        assert!(error.message.contains("[plugins] upload_bytes_max (1048576)"), "{}", error.message);
        let bad_digest = Announced { digest: "abc".to_owned(), ..announced(&bytes) };
        assert_eq!(uploads.begin(bad_digest, 0).unwrap_err().code, ErrorCode::InvalidRequest);

        let id = uploads.begin(announced(&bytes), 0).unwrap();
        assert!(uploads.append(id, 10, &bytes[..10], 0).unwrap_err().message.contains("offset 10"));
        assert!(uploads.append(id, 0, &[0; 1001], 0).unwrap_err().message.contains("pass the 1000 bytes"));
        uploads.append(id, 0, &bytes[..500], 0).unwrap();
        assert!(uploads.finish(id, 0).unwrap_err().message.contains("500 of the 1000"));

        let id = uploads.begin(announced(&bytes), 0).unwrap();
        uploads.append(id, 0, &[8u8; 1000], 0).unwrap();
        assert!(uploads.finish(id, 0).unwrap_err().message.contains("not the announced"));
    }

    #[test]
    fn idle_uploads_are_forgotten_and_their_room_returns() {
        let mut uploads = PendingUploads::new(1 << 20);
        let big = Announced { size_bytes: 1 << 20, ..announced(b"x") };
        let first = uploads.begin(big.clone(), 0).unwrap();
        uploads.begin(big.clone(), 0).unwrap();
        assert_eq!(uploads.begin(big.clone(), 1).unwrap_err().code, ErrorCode::ResourceExhausted, "twice the max");
        uploads.begin(big, IDLE_MS).unwrap();
        assert!(uploads.append(first, 0, b"x", IDLE_MS).unwrap_err().message.contains("no upload"));
    }

    #[test]
    fn an_upload_being_finished_counts_and_never_idles_until_done() {
        let mut uploads = PendingUploads::new(1 << 20);
        let bytes = vec![1u8; 1 << 20];
        let id = uploads.begin(announced(&bytes), 0).unwrap();
        for (index, chunk) in bytes.chunks(CHUNK_BYTES_MAX as usize).enumerate() {
            uploads.append(id, (index * CHUNK_BYTES_MAX as usize) as u64, chunk, 0).unwrap();
        }
        assert_eq!(uploads.finish(id, 0).unwrap().1, bytes);
        let other = announced(&bytes);
        uploads.begin(other.clone(), 10 * IDLE_MS).unwrap();
        let refused = uploads.begin(other.clone(), 10 * IDLE_MS).unwrap_err();
        assert_eq!(refused.code, ErrorCode::ResourceExhausted, "the finishing one still counts");
        uploads.done(id);
        uploads.begin(other, 10 * IDLE_MS).unwrap();
    }
}
