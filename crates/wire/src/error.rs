//! Why a buffer was refused. Each variant is a drop reason the daemon counts.

use core::fmt;

/// The reason a buffer did not parse. Kept small and `Copy` so that the packet path
/// can count it without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer is shorter than the header, or than a length field claims.
    Truncated,
    /// A version field is wrong (IPv4 not 4, IPv6 not 6).
    BadVersion,
    /// A length field is inconsistent (IHL < 5, UDP length < 8, …).
    BadLength,
    /// A Teredo payload starts with an unknown indicator, or indicators are out of order.
    BadIndicator,
    /// A neighbor-discovery option has length 0 or runs past the message.
    BadOption,
    /// The IPv6 extension-header chain is too long, repeats a header, or misplaces
    /// hop-by-hop options.
    BadChain,
    /// A checksum does not verify.
    BadChecksum,
    /// A value the packet carries is not allowed (a code, a prefix length…).
    BadValue,
    /// The output buffer is too small for what is being emitted.
    BufferTooSmall,
}

impl Error {
    /// A short stable name, used as a counter label and in logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Error::Truncated => "truncated",
            Error::BadVersion => "bad_version",
            Error::BadLength => "bad_length",
            Error::BadIndicator => "bad_indicator",
            Error::BadOption => "bad_option",
            Error::BadChain => "bad_extension_chain",
            Error::BadChecksum => "bad_checksum",
            Error::BadValue => "bad_value",
            Error::BufferTooSmall => "buffer_too_small",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::error::Error for Error {}

/// Result with the wire [`Error`].
pub type Result<T> = core::result::Result<T, Error>;
