//! The lab's error: what failed and, where it can tell, how to fix it.

use std::fmt;

/// Something in the lab did not work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabError(pub String);

impl fmt::Display for LabError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LabError {}

/// Result with [`LabError`].
pub type Result<T> = std::result::Result<T, LabError>;

/// Build an error from anything printable.
pub fn err<T>(msg: impl Into<String>) -> Result<T> {
    Err(LabError(msg.into()))
}
