//! The lab's paced generator of whole frames: live frames ([`LiveFrames`]) where the
//! kernel allows them, a packet socket's transmit ring ([`PacketRing`]) where it refuses
//! them. Both send the same frames at the same pace from the same interface; they
//! differ in what a frame costs the sending core, so which one ran is said
//! ([`FrameSender::kind`]) wherever its figures are shown.

use crate::error::Result;
use crate::live_frames::{mac_of, LiveFrames};
use crate::packet_ring::PacketRing;
use std::time::Duration;

/// A paced sender of whole frames on one interface of one namespace.
pub enum FrameSender {
    Live(LiveFrames),
    Ring {
        ring: PacketRing,
        mac: [u8; 6],
        /// Why not live frames.
        why: String,
    },
}

impl FrameSender {
    /// Live frames on interface `dev` of namespace `ns`, or the transmit ring if this
    /// kernel refuses them.
    pub fn on(ns: &str, dev: &str) -> Result<FrameSender> {
        Ok(match LiveFrames::unless_refused(ns, dev)? {
            Ok(live) => FrameSender::Live(live),
            Err(why) => FrameSender::Ring { ring: PacketRing::on(ns, dev)?, mac: mac_of(ns, dev)?, why },
        })
    }

    /// Which generator this is, in a line for a report.
    pub fn kind(&self) -> String {
        match self {
            FrameSender::Live(_) => "live frames (an XDP program's test run, paced in the program)".into(),
            FrameSender::Ring { why, .. } => format!(
                "a packet socket's transmit ring (AF_PACKET, paced in userland), not live frames: {why}; \
                 it costs the traffic core more a frame, so the sender falls short sooner"
            ),
        }
    }

    /// The interface's own hardware address (a frame's source).
    pub fn mac(&self) -> [u8; 6] {
        match self {
            FrameSender::Live(live) => live.mac(),
            FrameSender::Ring { mac, .. } => *mac,
        }
    }

    /// As [`LiveFrames::paced`].
    pub fn paced(&self, frames: &[Vec<u8>], run: u64, rate: u64, burst: u32, dur: Duration) -> std::io::Result<u64> {
        match self {
            FrameSender::Live(live) => live.paced(frames, run, rate, burst, dur),
            FrameSender::Ring { ring, .. } => ring.paced(frames, run, rate, burst, dur),
        }
    }

    /// The first failure of a paced run so far: a trial that sent nothing for it would
    /// count as one that lost everything.
    pub fn failure(&self) -> Option<String> {
        match self {
            FrameSender::Live(live) => live.failure(),
            FrameSender::Ring { ring, .. } => ring.failure(),
        }
    }
}
