//! One driver loop for every role, as wireguard-go runs one over `conn.Bind` and
//! `tun.Device`: wait until an input is readable or something is due; read each
//! datagram input a bounded number of batches and the packet input a bounded number
//! of packets, the role deciding on each; the role's timers when due; send what the
//! decisions queued; then what runs around the role (the shell's chores, signals,
//! status, watches).
//!
//! The inputs and outputs are small batch interfaces. Their Linux backends keep the
//! offloads inside (`io::udp_batch`: `recvmmsg`, GRO rows; `io::tun_batch`: virtio-net
//! headers, super-packets); the in-memory backend (`runtime::memory`) lets a test drive
//! a whole role's loop without root or a device.
//!
//! Reads are bounded so that a flood on one input cannot hold the loop away from the
//! others, its timers and the stop flag.

use crate::io::batch::{DatagramInput, PacketInput};
use crate::runtime::{wait, Failure};
use nix::poll::{PollFd, PollFlags};
use smallvec::SmallVec;
use std::net::SocketAddrV4;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

/// What a role's loop reads: its datagram inputs (a role tells them apart by index)
/// and its packet input, if it has one.
pub struct Inputs<D, P> {
    pub datagrams: Vec<D>,
    pub packets: Option<P>,
}

/// A role's decisions, as the loop calls on them. The role owns its state machine and
/// its outputs; the loop owns the inputs.
pub trait Role {
    type Datagrams: DatagramInput;
    type Packets: PacketInput;
    /// Batches read from one datagram input per round at most.
    const DATAGRAM_BATCHES: usize;
    /// Packets read from the packet input per round at most.
    const PACKETS: usize;
    /// When its timers are next due (`None`: nothing until I/O).
    fn deadline(&self) -> Option<Instant>;
    /// Shown each datagram a little before it is handled (a relay starts fetching the
    /// sender's entry, so that a batch's memory waits overlap).
    fn ahead(&self, _data: &[u8]) {}
    /// A datagram from input number `input`; `now` is when its batch was read.
    fn on_datagram(&mut self, now: Instant, input: usize, from: SocketAddrV4, data: &[u8]);
    fn on_packet(&mut self, now: Instant, packet: &[u8]);
    /// The timers, when [`deadline`](Self::deadline) has passed.
    fn on_deadline(&mut self, now: Instant);
    /// Send what the decisions queued.
    fn flush(&mut self);
    /// After each datagram input's reading: by default, send what it queued.
    fn after_input(&mut self) {
        self.flush();
    }
    /// A read the packet input failed with: the loop's end, unless the role says the
    /// round's reading ends there.
    fn packets_failed(&mut self, e: Failure) -> Result<(), Failure> {
        Err(e)
    }
}

/// What runs around a role's rounds: when to stop, other descriptors to wake for, busy
/// polling, the chores after a round.
pub trait Around<R: Role> {
    /// Whether the loop ends now (asked before each wait).
    fn done(&mut self, role: &mut R) -> Result<bool, Failure>;
    /// When to wake at the latest beside the role's deadline (the shell's period, a
    /// drain's end).
    fn wake_at(&mut self, role: &R) -> Option<Instant>;
    /// Look again at once, without waiting (busy polling after traffic).
    fn spin(&mut self) -> bool {
        false
    }
    /// Descriptors watched beside the inputs, in an order [`woke`](Self::woke) knows.
    fn watch<'a>(&'a self, _role: &'a R, _fds: &mut Watched<'a>) {}
    /// Which of the watched descriptors were readable (`any`: anything was, an input
    /// too), before the inputs are read.
    fn woke(&mut self, _role: &mut R, _readable: &[bool], _any: bool) -> Result<(), Failure> {
        Ok(())
    }
    /// After each round, with what it did.
    fn after_round(
        &mut self,
        _role: &mut R,
        _inputs: &Inputs<R::Datagrams, R::Packets>,
        _round: Turned,
    ) -> Result<(), Failure> {
        Ok(())
    }
}

/// What a round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Turned {
    /// Datagrams and packets decided on.
    pub handled: usize,
    /// Whether the timers ran.
    pub timers: bool,
}

/// Descriptors a wait watches beside the inputs (on the stack for the usual few).
pub type Watched<'a> = SmallVec<[BorrowedFd<'a>; 8]>;

/// Run `role` until `around` says it is done.
pub fn run<R: Role>(
    role: &mut R,
    inputs: &mut Inputs<R::Datagrams, R::Packets>,
    around: &mut impl Around<R>,
) -> Result<(), Failure> {
    while !around.done(role)? {
        // A wait that ended with nothing readable (a deadline, a signal) reads nothing.
        let read = if around.spin() {
            std::thread::yield_now();
            true
        } else {
            wait(role, inputs, around)?
        };
        let turned = turn(role, inputs, read)?;
        around.after_round(role, inputs, turned)?;
    }
    Ok(())
}

/// Sleep until an input or a watched descriptor is readable, the role's deadline or
/// `around`'s wake-up (not at all while an input holds what no descriptor announces);
/// then tell `around` what woke. Returns whether anything was readable.
fn wait<R: Role>(
    role: &mut R,
    inputs: &Inputs<R::Datagrams, R::Packets>,
    around: &mut impl Around<R>,
) -> Result<bool, Failure> {
    let until = [role.deadline(), around.wake_at(role)].into_iter().flatten().min();
    let pending = inputs.datagrams.iter().any(DatagramInput::pending)
        || inputs.packets.as_ref().is_some_and(PacketInput::pending);
    let timeout = match until {
        _ if pending => Duration::ZERO,
        Some(t) => t.saturating_duration_since(Instant::now()),
        None => Duration::from_secs(86_400),
    };
    let (any, readable) = {
        let mut watched = Watched::new();
        around.watch(role, &mut watched);
        let own = inputs
            .datagrams
            .iter()
            .filter_map(DatagramInput::fd)
            .chain(inputs.packets.iter().filter_map(PacketInput::fd));
        let mut fds: SmallVec<[PollFd<'_>; 16]> = own.map(|fd| PollFd::new(fd, PollFlags::POLLIN)).collect();
        let first_watched = fds.len();
        fds.extend(watched.iter().map(|fd| PollFd::new(*fd, PollFlags::POLLIN)));
        let any = if pending {
            // The watched descriptors looked at, the inputs read at once.
            wait::readable_now(&mut fds)?;
            true
        } else {
            wait::readable(&mut fds, timeout)?
        };
        let readable: SmallVec<[bool; 16]> =
            fds[first_watched..].iter().map(|f| f.revents().is_some_and(|r| r.contains(PollFlags::POLLIN))).collect();
        (any, readable)
    };
    around.woke(role, &readable, any)?;
    Ok(any)
}

/// One round: each datagram input a bounded number of batches (sent after each), the
/// packet input, the timers when due, and what they queued (tests drive a role with it).
#[cfg(test)]
pub fn round<R: Role>(role: &mut R, inputs: &mut Inputs<R::Datagrams, R::Packets>) -> Result<Turned, Failure> {
    turn(role, inputs, true)
}

/// A round, reading the inputs only if `read`.
fn turn<R: Role>(role: &mut R, inputs: &mut Inputs<R::Datagrams, R::Packets>, read: bool) -> Result<Turned, Failure> {
    let mut handled = 0;
    let datagrams = if read { &mut inputs.datagrams[..] } else { &mut [] };
    for (i, input) in datagrams.iter_mut().enumerate() {
        let now = Instant::now();
        handled += input
            .read(R::DATAGRAM_BATCHES, role, R::ahead, |r, from, data| r.on_datagram(now, i, from, data))
            .map_err(|e| Failure::runtime(format!("receive: {e}")))?;
        role.after_input();
    }
    if let Some(packets) = inputs.packets.as_mut().filter(|_| read) {
        let now = Instant::now();
        match packets.read(R::PACKETS, |packet| role.on_packet(now, packet)) {
            Ok(n) => handled += n,
            Err(e) => role.packets_failed(Failure::runtime(format!("read {}: {e}", packets.name())))?,
        }
    }
    let now = Instant::now();
    let timers = role.deadline().is_some_and(|t| now >= t);
    if timers {
        role.on_deadline(now);
    }
    role.flush();
    Ok(Turned { handled, timers })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::batch::{DatagramOutput, PacketOutput};
    use crate::io::memory::{DatagramsIn, DatagramsOut, PacketsIn, PacketsOut};

    /// A role that echoes each datagram back to its sender on the input it came from,
    /// writes each packet back, counts its timers, and keeps what it saw in order.
    struct Echo {
        out: [DatagramsOut; 2],
        tun: PacketsOut,
        seen: Vec<String>,
        due: Option<Instant>,
        timers: usize,
    }

    impl Role for Echo {
        type Datagrams = DatagramsIn;
        type Packets = PacketsIn;
        const DATAGRAM_BATCHES: usize = 2;
        const PACKETS: usize = 3;
        fn deadline(&self) -> Option<Instant> {
            self.due
        }
        fn on_datagram(&mut self, _now: Instant, input: usize, from: SocketAddrV4, data: &[u8]) {
            self.seen.push(format!("udp{input}:{}", data[0]));
            self.out[input].push(from, data);
        }
        fn on_packet(&mut self, _now: Instant, packet: &[u8]) {
            self.seen.push(format!("tun:{}", packet[0]));
            self.tun.push(packet);
        }
        fn on_deadline(&mut self, _now: Instant) {
            self.timers += 1;
            self.due = None;
        }
        fn flush(&mut self) {
            self.out.iter_mut().for_each(DatagramOutput::flush);
            self.tun.flush();
        }
    }

    fn echo() -> Echo {
        Echo { out: Default::default(), tun: PacketsOut::default(), seen: Vec::new(), due: None, timers: 0 }
    }

    fn inputs(flood: usize, other: usize, packets: usize) -> Inputs<DatagramsIn, PacketsIn> {
        let from: SocketAddrV4 = "192.0.2.7:3544".parse().unwrap();
        let mut a = DatagramsIn::default();
        a.queue.extend((0..flood).map(|i| (from, vec![i as u8])));
        let mut b = DatagramsIn::default();
        b.queue.extend((0..other).map(|i| (from, vec![i as u8])));
        let mut p = PacketsIn::default();
        p.queue.extend((0..packets).map(|i| vec![i as u8]));
        Inputs { datagrams: vec![a, b], packets: Some(p) }
    }

    /// Stops after `rounds` rounds; counts the wakes it was told of.
    struct Rounds {
        left: usize,
        woken: usize,
    }

    impl Around<Echo> for Rounds {
        fn done(&mut self, _role: &mut Echo) -> Result<bool, Failure> {
            let done = self.left == 0;
            self.left = self.left.saturating_sub(1);
            Ok(done)
        }
        fn wake_at(&mut self, _role: &Echo) -> Option<Instant> {
            Some(Instant::now() + Duration::from_millis(20))
        }
        fn woke(&mut self, _role: &mut Echo, _readable: &[bool], any: bool) -> Result<(), Failure> {
            self.woken += usize::from(any);
            Ok(())
        }
    }

    #[test]
    fn a_flood_on_one_input_leaves_the_others_their_turn_every_round() {
        // 64 datagrams a batch, two batches a round: a flood of 300 takes three rounds,
        // and each round still reads the other input and three packets.
        let (mut role, mut inputs) = (echo(), inputs(300, 2, 7));
        let turned = round(&mut role, &mut inputs).unwrap();
        assert_eq!(turned, Turned { handled: 128 + 2 + 3, timers: false });
        assert_eq!(inputs.datagrams[0].queue.len(), 300 - 128, "two batches of the flood, no more");
        assert_eq!(inputs.datagrams[0].batches, 2);
        assert!(role.seen.contains(&"udp1:1".to_string()) && role.seen.contains(&"tun:2".to_string()));
        assert!(!role.seen.contains(&"tun:3".to_string()), "three packets a round");
        round(&mut role, &mut inputs).unwrap();
        let last = round(&mut role, &mut inputs).unwrap();
        assert_eq!(last.handled, 300 - 256 + 1, "the flood's rest, a short batch, and the last packet");
        assert_eq!(role.out[0].sent.len(), 300, "every datagram answered on its own input");
        assert_eq!(role.out[1].sent.len(), 2);
        assert_eq!(role.tun.written.len(), 7);
    }

    #[test]
    fn what_a_round_decided_leaves_within_the_round_in_the_order_it_came() {
        let (mut role, mut inputs) = (echo(), inputs(3, 0, 2));
        round(&mut role, &mut inputs).unwrap();
        let sent: Vec<u8> = role.out[0].sent.iter().map(|(_, d)| d[0]).collect();
        assert_eq!(sent, [0, 1, 2], "flushed by the round, in order");
        assert_eq!(role.seen, ["udp0:0", "udp0:1", "udp0:2", "tun:0", "tun:1"], "datagrams first, then packets");
    }

    #[test]
    fn the_timers_run_once_due_and_not_before() {
        let (mut role, mut inputs) = (echo(), inputs(0, 0, 0));
        role.due = Some(Instant::now() + Duration::from_secs(60));
        assert!(!round(&mut role, &mut inputs).unwrap().timers);
        assert_eq!(role.timers, 0);
        role.due = Some(Instant::now());
        assert!(round(&mut role, &mut inputs).unwrap().timers);
        assert_eq!(role.timers, 1);
    }

    #[test]
    fn the_loop_sleeps_until_the_deadline_and_wakes_at_once_for_queued_input() {
        // Nothing queued: each of two rounds sleeps until the 20 ms wake-up.
        let (mut role, mut quiet) = (echo(), inputs(0, 0, 0));
        let started = Instant::now();
        let mut around = Rounds { left: 2, woken: 0 };
        run(&mut role, &mut quiet, &mut around).unwrap();
        assert!(started.elapsed() >= Duration::from_millis(40), "slept {:?}", started.elapsed());
        assert_eq!(around.woken, 0, "nothing woke it but time");
        // A deadline sooner than the wake-up: it runs the timers.
        role.due = Some(Instant::now() + Duration::from_millis(5));
        run(&mut role, &mut quiet, &mut Rounds { left: 1, woken: 0 }).unwrap();
        assert_eq!(role.timers, 1);
        // Queued input: no sleep, told that something came.
        let mut busy = inputs(5, 0, 0);
        let mut around = Rounds { left: 1, woken: 0 };
        let started = Instant::now();
        run(&mut role, &mut busy, &mut around).unwrap();
        assert_eq!(around.woken, 1);
        assert!(started.elapsed() < Duration::from_millis(20), "waited {:?} with input queued", started.elapsed());
        assert_eq!(role.out[0].sent.len(), 5);
    }
}
