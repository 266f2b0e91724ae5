//! The state machine's peer list over the programs' map (`KernelPeers`): its clock
//! converted to the kernel's, a failed update turning the programs off.

use super::*;
use crate::io::udp_batch::SendBatch;
use shipworm_kernel_path::PeerMap;
use shipworm_proto::transmit::KernelPeers;
use std::net::{Ipv6Addr, SocketAddrV4};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// [`KernelPeers`] for a node's output with a `batch` ([`SendBatch`], its service
/// socket's) and a `kernel` (`Option<KernelPeerList>`): the list's calls, a listing
/// letting the batch go first ([`KernelPeerList::trust_after`]).
#[macro_export]
macro_rules! kernel_peers_after_sends {
    ($output:ty) => {
        impl shipworm_proto::transmit::KernelPeers for $output {
            fn trust(&mut self, peer: &std::net::Ipv6Addr, mapped: std::net::SocketAddrV4, heard: std::time::Duration) {
                if let Some(k) = &mut self.kernel {
                    k.trust_after(&mut self.batch, peer, mapped, heard);
                }
            }
            fn forget(&mut self, peer: &std::net::Ipv6Addr) {
                if let Some(k) = &mut self.kernel {
                    shipworm_proto::transmit::KernelPeers::forget(k, peer);
                }
            }
            fn heard_and_sent(
                &mut self,
                peer: &std::net::Ipv6Addr,
            ) -> Option<(std::time::Duration, Option<std::time::Duration>)> {
                shipworm_proto::transmit::KernelPeers::heard_and_sent(self.kernel.as_mut()?, peer)
            }
        }
    };
}

/// The state machine's view of the programs' map: its clock converted to the kernel's.
pub struct KernelPeerList {
    pub(super) map: PeerMap,
    /// CLOCK_MONOTONIC at the relay's time zero.
    pub(super) base: u64,
    pub(super) refused: Arc<AtomicU64>,
    pub(super) switch: Switch,
}

impl KernelPeerList {
    /// [`KernelPeers::trust`] for a node that batches its service socket's datagrams in
    /// `batch`: what it holds leaves first, so that a waiting peer's queue, sent just
    /// before its listing, is not overtaken by what the kernel sends the peer next.
    pub fn trust_after(&mut self, batch: &mut SendBatch, peer: &Ipv6Addr, mapped: SocketAddrV4, heard: Duration) {
        if !batch.is_empty() {
            batch.flush();
        }
        self.trust(peer, mapped, heard);
    }

    /// The map may hold a peer we no longer trust, at a mapping we no longer know:
    /// the programs are turned off, and every packet goes through the daemon.
    fn lost(&self, why: &str) {
        let off = self.switch.turn_off();
        tracing::error!(
            "kernel data path: {why}; turned off ({}), every packet now goes through the daemon",
            off.map_or_else(|e| format!("which failed too: {e}"), |()| "done".to_string())
        );
    }
}

impl KernelPeers for KernelPeerList {
    fn trust(&mut self, peer: &Ipv6Addr, mapped: SocketAddrV4, heard: Duration) {
        let at = self.base.saturating_add(u64::try_from(heard.as_nanos()).unwrap_or(u64::MAX));
        if let Err(e) = self.map.trust(peer, mapped, at) {
            self.refused.fetch_add(1, Ordering::Relaxed);
            if e.kind() == std::io::ErrorKind::Other {
                self.lost(&format!("{peer}: {e}"));
            }
        }
    }

    fn forget(&mut self, peer: &Ipv6Addr) {
        if let Err(e) = self.map.forget(peer) {
            self.refused.fetch_add(1, Ordering::Relaxed);
            self.lost(&format!("{peer} could not be taken out of the peer map: {e}"));
        }
    }

    fn heard_and_sent(&mut self, peer: &Ipv6Addr) -> Option<(Duration, Option<Duration>)> {
        let entry = self.map.get(peer).ok()??;
        let ours = |at: u64| Duration::from_nanos(at.saturating_sub(self.base));
        Some((ours(entry.heard), entry.unanswered.map(ours)))
    }
}
