//! [`Error`]: a failed call as plain data — the `ErrorCode` number every SDK
//! maps to its own exception or error type, and the message.

use client::{ClientError, ErrorCode};

/// A failed call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// The `ErrorCode` number (`abi::ErrorCode`; the table is append-only), or
    /// [`UNUSABLE`].
    pub code: u16,
    pub message: String,
}

/// Not an `ErrorCode`: the binding layer itself cannot run here (a client
/// used after `fork()`, no runtime). Bindings raise their language's runtime
/// error for it (Python's `RuntimeError`), not a broker error type.
pub const UNUSABLE: u16 = 0;

impl Error {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Error {
        Error { code: code.as_u16(), message: message.into() }
    }

    /// An [`UNUSABLE`] error.
    pub fn unusable(message: impl Into<String>) -> Error {
        Error { code: UNUSABLE, message: message.into() }
    }

    /// Whether retrying may succeed (`ErrorCode::is_retriable`).
    pub fn retriable(&self) -> bool {
        ErrorCode::from_u16(self.code).is_some_and(ErrorCode::is_retriable)
    }

    /// The code's name (`UnknownTopicOrPartition`, …), or `Unknown` for a
    /// number this build does not know.
    pub fn name(&self) -> &'static str {
        ErrorCode::from_u16(self.code).map_or("Unknown", ErrorCode::name)
    }
}

impl From<ClientError> for Error {
    fn from(error: ClientError) -> Error {
        Error { code: error.code().as_u16(), message: error.to_string() }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// One row of the `ErrorCode` table, for bindings that generate their error
/// types from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorInfo {
    pub code: u16,
    pub name: &'static str,
    pub retriable: bool,
}

/// Every error code, in number order.
pub fn error_codes() -> Vec<ErrorInfo> {
    ErrorCode::ALL
        .iter()
        .map(|code| ErrorInfo { code: code.as_u16(), name: code.name(), retriable: code.is_retriable() })
        .collect()
}
