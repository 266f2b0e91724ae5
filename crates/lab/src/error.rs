//! The lab's error: what failed and, where it can tell, how to fix it; for a scenario,
//! also the step that failed, which the end-to-end suite compares with the step a case
//! is expected to fail at.

use std::fmt;

/// Something in the lab did not work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabError {
    message: String,
    step: Option<u32>,
}

impl LabError {
    /// An error saying `message`.
    pub fn new(message: String) -> LabError {
        LabError { message, step: None }
    }

    /// Step `n` of a scenario (`what` it does) failed, because of `cause`.
    pub fn at_step(n: u32, what: &str, cause: LabError) -> LabError {
        LabError { message: format!("step {n} ({what}) failed: {cause}"), step: Some(n) }
    }

    /// The scenario step that failed, if this is a scenario's error.
    pub fn step(&self) -> Option<u32> {
        self.step
    }
}

impl fmt::Display for LabError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for LabError {}

/// Result with [`LabError`].
pub type Result<T> = std::result::Result<T, LabError>;

/// Build an error from anything printable.
pub fn err<T>(msg: impl Into<String>) -> Result<T> {
    Err(LabError::new(msg.into()))
}
