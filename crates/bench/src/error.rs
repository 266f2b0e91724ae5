//! The benchmark's one error: what went wrong, said once, on exit.

/// A failure that ends the run.
#[derive(Debug)]
pub struct Failure {
    /// What went wrong and, where we know it, how to fix it.
    pub message: String,
}

impl Failure {
    /// A failure at run time (a lab step, a socket, a file).
    pub fn runtime(message: impl Into<String>) -> Self {
        Failure { message: message.into() }
    }
}
