//! Where the client's output goes: the service socket's send batch and the TUN batch
//! (flushed when full and after each round), the probe socket for the NAT test (a
//! datagram now and then), and the random ports for peers behind symmetric NATs.

use crate::io::batch::PacketOutput;
use crate::io::kernel_path::KernelPeerList;
use crate::io::random_ports::RandomPorts;
use crate::io::tun_batch::{ReadCounts, TunOutput};
use crate::io::udp_batch::SendBatch;
use crate::runtime::report::{IoErrors, TunOffloadCounts};
use shipworm_proto::transmit::{KernelIntent, Ports, Source, Transmit};
use socket2::Socket;
use std::net::SocketAddrV4;
use std::num::NonZeroU16;

/// The client's output.
pub struct Output<'a> {
    pub batch: SendBatch,
    pub probe: &'a Socket,
    pub tun: TunOutput<'a>,
    /// Datagrams the probe socket could not send.
    pub probe_errors: u64,
    /// Random ports for peers behind symmetric NATs (RFC 6081 §5.4, §5.5).
    pub ports: RandomPorts,
    /// The kernel data path's peer list, if it runs.
    pub kernel: Option<KernelPeerList>,
    /// What the client wants of that list, carried out once its call returned
    /// (`kernel_intents`).
    pub intents: Vec<KernelIntent>,
}

impl Output<'_> {
    /// What the kernel refused, with what the TUN's reader could not read.
    pub fn io_errors(&self, read: ReadCounts) -> IoErrors {
        IoErrors {
            udp_send: self.batch.failed() + self.probe_errors + self.ports.failures,
            tun_write: self.tun.failed(),
            tun_read: read.refused,
            ..IoErrors::default()
        }
    }

    /// What the TUN offloads did.
    pub fn offloads(&self, read: ReadCounts) -> TunOffloadCounts {
        TunOffloadCounts { super_packets_read: read.super_packets, joined_writes: self.tun.joined_writes() }
    }

    /// Send what waits in the batches.
    pub fn flush(&mut self) {
        self.tun.flush();
        if !self.batch.is_empty() {
            self.batch.flush();
        }
    }
}

impl Transmit for Output<'_> {
    fn send(&mut self, from: Source, to: SocketAddrV4, payload: &[u8], ttl: Option<u8>) {
        match (from, ttl) {
            (Source::Service, None) => self.batch.push(to, payload),
            (Source::Service, Some(ttl)) => self.batch.send_hop_limited(to, payload, ttl),
            (Source::Port(port), ttl) => self.ports.send(port.get(), to, payload, ttl),
            (Source::Probe, _) => {
                if self.probe.send_to(payload, &to.into()).is_err() {
                    self.probe_errors += 1;
                }
            }
            // A server's socket: the client has none. Never asked; counted if it were.
            (Source::Secondary, _) => {
                debug_assert!(from != Source::Secondary, "the client has no secondary address");
                self.probe_errors += 1;
            }
        }
    }

    fn deliver(&mut self, packet: &[u8]) {
        self.tun.push(packet);
    }

    fn kernel(&mut self, intent: KernelIntent) {
        if self.kernel.is_some() {
            self.intents.push(intent);
        }
    }
}

impl Ports for Output<'_> {
    fn open_port(&mut self) -> Option<NonZeroU16> {
        self.ports.open().and_then(NonZeroU16::new)
    }

    fn close_port(&mut self, port: NonZeroU16) {
        self.ports.close(port.get());
    }
}
