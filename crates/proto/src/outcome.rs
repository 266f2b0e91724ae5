//! What became of one input, in the one shape every role returns: what it led to, or
//! the reason it was dropped. A drop is counted by the state machine before it returns
//! (its `stats().drops`), so a caller that only wants the counters may ignore the
//! outcome; the daemon logs drops at trace level from it, and tests assert on it.

use crate::drop_reason::DropReason;

/// What one input led to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Passed on: to a peer over UDP, or to the IPv6 side (the host stack, the native
    /// network).
    Forwarded,
    /// Answered by the state machine itself (a router advertisement, a bubble).
    Answered,
    /// Held while bubbles or a connectivity test go out.
    Queued,
    /// Taken, with nothing passed on (a bubble, an advertisement, a test's reply).
    Consumed,
    /// Not decided yet: the decision needs what the kernel data path saw of a peer,
    /// asked for ([`KernelIntent::Read`](crate::transmit::KernelIntent::Read)). The
    /// daemon answers (`kernel_saw`) and hands the same input again; nothing of it was
    /// done or counted.
    AskedKernel,
}

/// The result of one input: an [`Action`], or the [`DropReason`] it was dropped (and
/// counted) for.
pub type Outcome = Result<Action, DropReason>;
