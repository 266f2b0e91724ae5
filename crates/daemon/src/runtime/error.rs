//! The one error every command exits with: a line for stderr and an exit status.

/// A failure to report: one line on stderr and an exit status.
#[derive(Debug)]
pub struct Failure {
    /// What went wrong and, where we know it, how to fix it.
    pub message: String,
    /// 2 for bad input (usage, malformed arguments or configuration), 1 otherwise.
    pub status: u8,
}

impl Failure {
    /// Bad input from the user: exit status 2.
    pub fn usage(message: impl Into<String>) -> Self {
        Failure { message: message.into(), status: 2 }
    }

    /// A failure at run time (a socket, a permission…): exit status 1.
    pub fn runtime(message: impl Into<String>) -> Self {
        Failure { message: message.into(), status: 1 }
    }
}
