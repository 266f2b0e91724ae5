//! The client in the role loop (`runtime::role_loop`): what it decides on each input,
//! and what runs around its rounds — the network watch, the interface helper, the
//! discovery socket and the random ports (open only while peers behind symmetric NATs
//! use them), the shell's signals, status and chores.

use super::{ClientDaemon, BATCH, UDP_BATCHES_PER_ROUND};
use crate::io::tun_batch::TunInput;
use crate::io::udp_batch::RecvBatch;
use crate::runtime::logging;
use crate::runtime::role_loop::{Around, Inputs, Role, Turned, Watched};
use crate::runtime::shell::{Confined, Shell};
use crate::runtime::Failure;
use shipworm_proto::client::Via;
use smallvec::SmallVec;
use std::net::SocketAddrV4;
use std::num::NonZeroU16;
use std::os::fd::AsFd;
use std::time::Instant;

impl<'a> Role for ClientDaemon<'a> {
    type Datagrams = RecvBatch;
    type Packets = TunInput<'a>;
    const DATAGRAM_BATCHES: usize = UDP_BATCHES_PER_ROUND;
    const PACKETS: usize = BATCH;

    /// The state machine's deadline, the names' lookups, the port mapping's renewal;
    /// now when the servers changed (qualify at once).
    fn deadline(&self) -> Option<Instant> {
        if self.run_timers {
            return Some(self.started);
        }
        self.timers_due()
    }

    /// Input 0 is the service socket, 1 the probe socket.
    fn on_datagram(&mut self, now: Instant, input: usize, from: SocketAddrV4, data: &[u8]) {
        let via = if input == 0 { Via::Service } else { Via::Probe };
        let now = now.saturating_duration_since(self.started);
        let outcome = self.out.decide(&mut self.client, now, |c, out| c.on_udp(now, via, from, data, out));
        logging::outcome(outcome, "datagram", from);
    }

    fn on_packet(&mut self, now: Instant, packet: &[u8]) {
        let now = now.saturating_duration_since(self.started);
        let outcome = self.out.decide(&mut self.client, now, |c, out| c.on_tun(now, packet, out));
        logging::outcome(outcome, "packet", "the host");
    }

    fn on_deadline(&mut self, _now: Instant) {
        self.timers();
    }

    /// What the client wants of the kernel's peer list, then what waits to be sent.
    fn flush(&mut self) {
        self.out.carry_out(&mut self.client, self.started.elapsed());
        self.out.flush();
    }
}

/// What runs around the client's rounds.
pub struct ClientAround<'s> {
    shell: &'s Shell<Confined>,
    /// The status socket was readable at the last wait: answered after the round.
    status: bool,
}

impl<'s> ClientAround<'s> {
    pub fn new(shell: &'s Shell<Confined>) -> Self {
        ClientAround { shell, status: false }
    }
}

/// Where each descriptor sits among the watched ones; the discovery socket's place is
/// the status socket's when there is none (so that the random ports' start is fixed).
const WATCH: usize = 0;
const STATUS: usize = 1;
const DISCOVERY: usize = 2;
const HELPER: usize = 3;
const SIGNAL: usize = 4;
const PORTS: usize = 5;

impl<'a> Around<ClientDaemon<'a>> for ClientAround<'_> {
    fn done(&mut self, _d: &mut ClientDaemon<'a>) -> Result<bool, Failure> {
        Ok(self.shell.stop_requested())
    }

    fn wake_at(&mut self, _d: &ClientDaemon<'a>) -> Option<Instant> {
        Some(self.shell.next_wake())
    }

    /// The network watch, the status socket, discovery, the interface helper, signals,
    /// then each open random port.
    fn watch<'w>(&'w self, d: &'w ClientDaemon<'a>, fds: &mut Watched<'w>) {
        let status = self.shell.status_fd();
        let mut fixed = [status; PORTS];
        fixed[WATCH] = d.watch.as_fd();
        fixed[DISCOVERY] = d.discovery.as_ref().map_or(status, |x| x.as_fd());
        fixed[HELPER] = d.iface.helper.as_fd();
        fixed[SIGNAL] = self.shell.signal_fd();
        fds.extend(fixed);
        fds.extend(d.out.ports.fds().map(|(_, fd)| fd));
    }

    /// The helper's health and the network watch first (a change qualifies again),
    /// then the discovery socket and the random ports that were readable.
    fn woke(&mut self, d: &mut ClientDaemon<'a>, readable: &[bool], any: bool) -> Result<(), Failure> {
        let ready = |i: usize| readable.get(i) == Some(&true);
        self.status = ready(STATUS);
        // The ports readable, named while the list is the one watched (before anything
        // below may open or close one).
        let ports: SmallVec<[NonZeroU16; 8]> = d
            .out
            .ports
            .fds()
            .map(|(p, _)| p)
            .zip(readable.iter().skip(PORTS))
            .filter(|(_, &r)| r)
            .filter_map(|(p, _)| NonZeroU16::new(p))
            .collect();
        d.iface.check_helper()?;
        if d.watch.changed() {
            d.on_network_change();
        }
        d.read_others(ready(DISCOVERY) && d.discovery.is_some(), &ports);
        if any {
            self.shell.busy();
        }
        Ok(())
    }

    /// The state machine's events carried out on the interface, status requests, the
    /// shell's chores.
    fn after_round(
        &mut self,
        d: &mut ClientDaemon<'a>,
        inputs: &Inputs<RecvBatch, TunInput<'a>>,
        round: Turned,
    ) -> Result<(), Failure> {
        if round.timers {
            self.shell.busy();
        }
        d.out.carry_out(&mut d.client, d.started.elapsed());
        d.out.flush();
        if let Some(t) = &inputs.packets {
            d.tun_read = t.counts();
        }
        d.follow_events()?;
        if std::mem::take(&mut self.status) {
            self.shell.serve_status(&*d);
        }
        self.shell.tick(&*d);
        Ok(())
    }
}
