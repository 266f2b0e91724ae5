//! What the client wants of the kernel data path's peer list, carried out once its call
//! returned, in the order it wanted it: reads answered (and the input handed again when
//! it waited for one), listings and removals written.

use super::output::Output;
use crate::runtime::random::OsRandom;
use shipworm_proto::client::Client;
use shipworm_proto::transmit::KernelIntent;
use shipworm_proto::{Action, Outcome};
use std::time::Duration;

impl Output<'_> {
    /// Hands one input to the client (`input`) until it is decided, answering what it
    /// asks of the kernel in between; then carries out what it wants.
    pub fn decide(
        &mut self,
        client: &mut Client<OsRandom>,
        now: Duration,
        mut input: impl FnMut(&mut Client<OsRandom>, &mut Self) -> Outcome,
    ) -> Outcome {
        loop {
            let outcome = input(client, self);
            self.carry_out(client, now);
            if outcome != Ok(Action::AskedKernel) {
                return outcome;
            }
        }
    }

    /// Every intent the client left, and those their answers raise.
    pub fn carry_out(&mut self, client: &mut Client<OsRandom>, now: Duration) {
        while !self.intents.is_empty() {
            let intents = std::mem::take(&mut self.intents);
            for intent in intents {
                let Some(kernel) = self.kernel.as_mut() else { return };
                match intent {
                    // What was sent before goes first.
                    KernelIntent::Trust { peer, mapped, heard } => {
                        kernel.trust_after(&mut self.batch, &peer, mapped, heard)
                    }
                    KernelIntent::Forget { peer } => kernel.forget(&peer),
                    KernelIntent::Read { peer, sweep } => {
                        let seen = kernel.seen(&peer);
                        client.kernel_saw(now, peer, seen, sweep, self);
                    }
                }
            }
        }
    }
}
