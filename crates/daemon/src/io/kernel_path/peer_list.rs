//! The programs' peer map as a state machine's intents are carried out on it
//! ([`KernelIntent`]): its clock converted to the kernel's, what the kernel saw read
//! back for it, a failed update turning the programs off. The daemon alone makes these
//! calls, after the state machine's call returned (never under one of its locks).

use super::*;
use crate::io::udp_batch::SendBatch;
use shipworm_kernel_path::PeerMap;
use shipworm_proto::transmit::KernelSeen;
use std::net::{Ipv6Addr, SocketAddrV4};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The programs' peer map, in the state machine's clock.
pub struct KernelPeerList {
    pub(super) map: PeerMap,
    /// CLOCK_MONOTONIC at the state machine's time zero.
    pub(super) base: u64,
    pub(super) refused: Arc<AtomicU64>,
    pub(super) switch: Switch,
}

impl KernelPeerList {
    /// [`KernelPeerList::trust`] for a node that batches its service socket's datagrams
    /// in `batch`: what it holds leaves first, so that a waiting peer's queue, sent just
    /// before its listing, is not overtaken by what the kernel sends the peer next.
    pub fn trust_after(&mut self, batch: &mut SendBatch, peer: &Ipv6Addr, mapped: SocketAddrV4, heard: Duration) {
        if !batch.is_empty() {
            batch.flush();
        }
        self.trust(peer, mapped, heard);
    }

    /// `peer` is trusted at `mapped`, heard from at `heard`. A full map refuses it
    /// (counted): its packets then pass through the daemon.
    pub fn trust(&mut self, peer: &Ipv6Addr, mapped: SocketAddrV4, heard: Duration) {
        let at = self.base.saturating_add(u64::try_from(heard.as_nanos()).unwrap_or(u64::MAX));
        if let Err(e) = self.map.trust(peer, mapped, at) {
            self.refused.fetch_add(1, Ordering::Relaxed);
            if e.kind() == std::io::ErrorKind::Other {
                self.lost(&format!("{peer}: {e}"));
            }
        }
    }

    /// `peer` is trusted no more.
    pub fn forget(&mut self, peer: &Ipv6Addr) {
        if let Err(e) = self.map.forget(peer) {
            self.refused.fetch_add(1, Ordering::Relaxed);
            self.lost(&format!("{peer} could not be taken out of the peer map: {e}"));
        }
    }

    /// What the kernel saw of `peer` (`None`: not in the map, or the map could not be
    /// read).
    pub fn seen(&mut self, peer: &Ipv6Addr) -> Option<KernelSeen> {
        let entry = self.map.get(peer).ok()??;
        let ours = |at: u64| Duration::from_nanos(at.saturating_sub(self.base));
        Some(KernelSeen { heard: ours(entry.heard), sent: entry.unanswered.map(ours) })
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
