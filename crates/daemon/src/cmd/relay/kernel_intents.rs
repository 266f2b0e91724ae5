//! What the relay wants of the kernel data path's peer list, carried out once its call
//! returned and its shard lock is gone: reads answered (and the input handed again when
//! it waited for one), listings and removals written.
//!
//! Two workers may carry out intents for one client in another order than the relay
//! made them. Each write is therefore of what the relay wants for the client at that
//! moment ([`SharedRelay::kernel_entry`]), under its shard's writer lock: whichever
//! worker writes last writes the state after the last change. A removal the entry no
//! longer wants writes nothing: every change that lists a client comes with a listing
//! intent, carried out after it by the worker whose batch holds the client's queue.

use super::*;
use shipworm_proto::{Action, Outcome};
use std::sync::PoisonError;

impl Output<'_> {
    /// Hands one input to the relay (`input`) until it is decided, answering what it
    /// asks of the kernel in between; then carries out what it wants.
    pub(super) fn decide(
        &mut self,
        shared: &WorkerShared<'_>,
        w: &mut RelayWorker,
        now: Duration,
        mut input: impl FnMut(&mut RelayWorker, &mut Self) -> Outcome,
    ) -> Outcome {
        loop {
            let outcome = input(w, self);
            self.carry_out(shared, w, now);
            if outcome != Ok(Action::AskedKernel) {
                return outcome;
            }
        }
    }

    /// Every intent the relay left, and those their answers raise.
    pub(super) fn carry_out(&mut self, shared: &WorkerShared<'_>, w: &mut RelayWorker, now: Duration) {
        let relay = shared.relay;
        while !self.intents.is_empty() {
            let intents = std::mem::take(&mut self.intents);
            for intent in intents {
                let Some(kernel) = self.kernel.as_mut() else { return };
                match intent {
                    KernelIntent::Trust { peer, .. } | KernelIntent::Forget { peer } => {
                        let writer = &shared.kernel_writers[relay.kernel_writer(&peer, shared.kernel_writers.len())];
                        let _one_at_a_time = writer.lock().unwrap_or_else(PoisonError::into_inner);
                        let listing = matches!(intent, KernelIntent::Trust { .. });
                        match relay.kernel_entry(&peer) {
                            // What was sent before goes first.
                            Some((mapped, heard)) if listing => {
                                kernel.trust_after(&mut self.batch, &peer, mapped, heard)
                            }
                            // A removal the entry no longer wants: the listing that came
                            // after it writes (its worker holds the client's queue).
                            Some(_) => {}
                            None => kernel.forget(&peer),
                        }
                    }
                    KernelIntent::Read { peer, sweep } => {
                        let seen = kernel.seen(&peer);
                        relay.kernel_saw(w, now, peer, seen, sweep, self);
                    }
                }
            }
        }
    }
}
