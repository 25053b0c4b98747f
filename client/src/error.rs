//! [`ClientError`]: every way a client call can fail, with the broker's stable
//! [`ErrorCode`] when the broker answered with one. SDKs map errors to native
//! exceptions from [`ClientError::code`] (one table for every language).

use abi::ErrorCode;

/// A failed client operation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The broker refused the request with a code from the `ErrorCode` table.
    #[error("{code}: {message}")]
    Broker { code: ErrorCode, message: String },
    /// No connection could be made.
    #[error("cannot connect to {address}: {reason}")]
    Connect { address: String, reason: String },
    /// The connection broke while a call was in flight (or before it was sent).
    #[error("connection to {address} lost: {reason}")]
    Disconnected { address: String, reason: String },
    /// The broker could not be reached in time or did not answer in time.
    #[error("{operation} timed out after {timeout_ms} ms")]
    Timeout { operation: &'static str, timeout_ms: u64 },
    /// A setting is unknown or has a bad value; every problem is listed.
    #[error("invalid client config: {}", problems.join("; "))]
    InvalidConfig { problems: Vec<String> },
    /// A call's argument is invalid (checked before anything is sent).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The broker sent bytes that are not valid record batches.
    #[error("corrupt data from the broker: {0}")]
    Corrupt(String),
    /// A stored batch of a partition cannot be decoded (written by a faulty
    /// producer before the broker validated records, or damaged on disk). Every
    /// record before it was delivered; the application decides whether to stop or
    /// to seek to `skip_to` and lose the batch (as with Kafka's
    /// `RecordDeserializationException`).
    #[error(
        "{topic}-{partition}: the batch at offset {offset} is corrupt ({reason}); the records before it were \
         delivered; seek to offset {skip_to} to skip it"
    )]
    CorruptBatch {
        topic: String,
        partition: i32,
        /// First offset of the bad batch (the position stays here).
        offset: i64,
        /// The offset after the bad batch: where a seek skips to.
        skip_to: i64,
        reason: String,
    },
    /// The broker's answer broke the protocol (a missing field, an unknown value).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The producer or consumer was closed.
    #[error("the client is closed")]
    Closed,
}

impl ClientError {
    pub(crate) fn broker(code: ErrorCode, message: impl Into<String>) -> ClientError {
        ClientError::Broker { code, message: message.into() }
    }

    /// The `ErrorCode` for this error: the broker's own, or the closest one for
    /// client-side failures (`RequestTimedOut` for timeouts, `NetworkError` for
    /// refused or lost connections, …). SDK exceptions are chosen from this.
    pub fn code(&self) -> ErrorCode {
        match self {
            ClientError::Broker { code, .. } => *code,
            ClientError::Connect { .. } | ClientError::Disconnected { .. } => ErrorCode::NetworkError,
            ClientError::Timeout { .. } => ErrorCode::RequestTimedOut,
            ClientError::InvalidConfig { .. } => ErrorCode::InvalidConfig,
            ClientError::InvalidArgument(_) => ErrorCode::InvalidRequest,
            ClientError::Corrupt(_) | ClientError::CorruptBatch { .. } => ErrorCode::CorruptMessage,
            ClientError::Protocol(_) => ErrorCode::UnknownServerError,
            // A call on a closed client is the caller's mistake, not the broker's.
            ClientError::Closed => ErrorCode::InvalidRequest,
        }
    }

    /// Whether retrying the same call may succeed (after a metadata refresh).
    pub fn is_retriable(&self) -> bool {
        match self {
            ClientError::Broker { code, .. } => code.is_retriable(),
            ClientError::Connect { .. } | ClientError::Disconnected { .. } | ClientError::Timeout { .. } => true,
            _ => false,
        }
    }

    /// Converts an RPC-level error of a call to `address`.
    pub(crate) fn from_rpc(address: &str, error: capnp::Error) -> ClientError {
        match error.kind {
            capnp::ErrorKind::Disconnected => {
                ClientError::Disconnected { address: address.to_owned(), reason: error.extra }
            }
            capnp::ErrorKind::Overloaded => ClientError::broker(ErrorCode::ResourceExhausted, error.extra),
            _ => ClientError::Protocol(error.to_string()),
        }
    }
}

/// `Ok(())` for an answer without an `error` field, else the broker's error
/// (`?`-propagates a malformed answer). A macro because every capnp result type is
/// its own type.
macro_rules! refused_or_ok {
    ($response:expr) => {
        match $response.has_error() {
            true => Err($crate::error::broker_error($response.get_error()?)),
            false => Ok(()),
        }
    };
}
pub(crate) use refused_or_ok;

/// The [`ClientError`] for an `Error` struct of a response.
pub(crate) fn broker_error(error: abi::weir_capnp::error::Reader<'_>) -> ClientError {
    let message = error.get_message().ok().and_then(|text| text.to_str().ok()).unwrap_or("").to_owned();
    let code = ErrorCode::from_u16(error.get_code()).unwrap_or(ErrorCode::UnknownServerError);
    ClientError::Broker { code, message }
}

impl From<capnp::Error> for ClientError {
    /// A malformed response (RPC failures go through `ClientError::from_rpc`).
    fn from(error: capnp::Error) -> ClientError {
        ClientError::Protocol(error.to_string())
    }
}

impl From<std::str::Utf8Error> for ClientError {
    fn from(error: std::str::Utf8Error) -> ClientError {
        ClientError::Protocol(format!("text field is not UTF-8: {error}"))
    }
}

impl From<capnp::NotInSchema> for ClientError {
    fn from(error: capnp::NotInSchema) -> ClientError {
        ClientError::Protocol(error.to_string())
    }
}
