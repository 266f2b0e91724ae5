//! The rate searches' loads as whole frames ([`Frames`], live frames where the kernel allows them): each emulated client's Teredo
//! datagrams and the native hosts' IPv6 packets, whole frames for the switch's port
//! towards the relay host to hand it.

use crate::error::Failure;
use crate::measure::{lab_err, RUN};
use crate::packets::{ipv6_frame, ipv6_udp, teredo_frame};
use crate::traffic::{Emulated, Frames};
use shipworm_lab::frame_sender::FrameSender;
use shipworm_lab::live_frames::mac_of;
use shipworm_lab::{Lab, GEN_NATIVE_V6, HOST6_V6, SINK_NATIVE_V6};
use std::net::{Ipv6Addr, SocketAddrV4};

/// A lab's rate loads ([`Frames`]): frames handed to the relay host's interface by the
/// switch's port towards it, as if the wire brought them from the generator or the
/// native host (their source addresses are those hosts'). Sent from the hosts, every
/// frame also crossed the switch on the traffic core, whose work per frame then held
/// the rates near where a sender of sockets held them.
pub(crate) struct Senders {
    wire: FrameSender,
    relay: [u8; 6],
    gen: [u8; 6],
    h6: [u8; 6],
}

impl Senders {
    pub(crate) fn of(lab: &Lab) -> Result<Senders, Failure> {
        let mac = |host: &str| mac_of(&lab.ns(host), "eth0").map_err(lab_err);
        let wire = FrameSender::on(&lab.ns("core"), RELAY_PORT_ON_SWITCH).map_err(lab_err)?;
        if let FrameSender::Ring { .. } = wire {
            // Said once a run, here and in the report: the figures' generator is not the usual one.
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| println!("  generator: {}", wire.kind()));
        }
        Ok(Senders { wire, relay: mac("rly")?, gen: mac("gen")?, h6: mac("h6")? })
    }

    /// Decapsulation load of `size`-byte packets from each emulated client of `emu` at
    /// its mapping to `relay`, for the native sink, in runs of [`RUN`] per client.
    pub(crate) fn decap(&self, emu: &Emulated, size: usize, relay: SocketAddrV4) -> Frames<'_> {
        let mut packet = vec![0u8; size];
        let frames = emu
            .addrs
            .iter()
            .zip(emu.mappings())
            .map(|(&a, from)| {
                ipv6_udp(&mut packet, size, a, SINK_NATIVE_V6, 9000, 0);
                teredo_frame(self.relay, self.gen, from, relay, &packet)
            })
            .collect();
        Frames { sender: &self.wire, frames, run: RUN }
    }

    /// Native load of `size`-byte packets from the native host to each of `to` in
    /// runs of [`RUN`], to port `port`.
    pub(crate) fn native_load(&self, to: &[Ipv6Addr], port: u16, size: usize) -> Frames<'_> {
        Frames { sender: &self.wire, frames: self.native(self.h6, HOST6_V6, to, port, size), run: RUN }
    }

    /// Native load of `size`-byte packets from the generator to the native sink.
    pub(crate) fn generator_load(&self, size: usize) -> Frames<'_> {
        Frames {
            sender: &self.wire,
            frames: self.native(self.gen, GEN_NATIVE_V6, &[SINK_NATIVE_V6], 9000, size),
            run: RUN,
        }
    }

    /// Which generator sends the frames, for the report.
    pub(crate) fn kind(&self) -> String {
        self.wire.kind()
    }

    /// Fails if a load of these failed to send (its trials' figures are void).
    pub(crate) fn check(&self) -> Result<(), Failure> {
        self.wire.failure().map_or(Ok(()), |e| Err(Failure::runtime(format!("the frame generator failed: {e}"))))
    }

    fn native(&self, mac: [u8; 6], from: Ipv6Addr, to: &[Ipv6Addr], port: u16, size: usize) -> Vec<Vec<u8>> {
        let mut packet = vec![0u8; size];
        to.iter()
            .map(|&dst| {
                ipv6_udp(&mut packet, size, from, dst, port, 0);
                ipv6_frame(self.relay, mac, &packet)
            })
            .collect()
    }
}

/// The switch's port towards the relay host.
const RELAY_PORT_ON_SWITCH: &str = "p2";
