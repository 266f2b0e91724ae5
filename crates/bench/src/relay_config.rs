//! The relay configurations the benchmark measures shipworm with, and how its relay
//! forwards (`--forward`).

use std::sync::atomic::{AtomicBool, Ordering};

/// shipworm's relay configuration in the bench: one worker, as it picks for itself on
/// the one core the relay host has (see `cpus`).
pub(crate) const SHIPWORM_EXTRA: &str = "RelayThreads 1\nDataPath kernel\nKernelForward direct\n";
/// The same relay forwarding through the host's IPv6 stack, shipworm's default
/// (`shipworm-bench --forward stack`).
pub(crate) const SHIPWORM_STACK_EXTRA: &str = "RelayThreads 1\nDataPath kernel\nKernelForward stack\n";

/// How the measured relay forwards, set once at start (`--forward`).
static FORWARD_STACK: AtomicBool = AtomicBool::new(false);

/// The measured relay's configuration: [`SHIPWORM_EXTRA`], or with `--forward stack`
/// [`SHIPWORM_STACK_EXTRA`].
pub(crate) fn shipworm_extra() -> &'static str {
    if forwards_through_stack() {
        SHIPWORM_STACK_EXTRA
    } else {
        SHIPWORM_EXTRA
    }
}
/// The same relay moving every packet itself.
pub(crate) const SHIPWORM_USER_EXTRA: &str = "RelayThreads 1\nDataPath user\n";

/// `--forward stack`: the relay forwards through the host's stack.
pub(crate) fn forward_through_stack(yes: bool) {
    FORWARD_STACK.store(yes, Ordering::Relaxed);
}

/// The relay measured forwards through the host's stack (`--forward stack`).
pub(crate) fn forwards_through_stack() -> bool {
    FORWARD_STACK.load(Ordering::Relaxed)
}
