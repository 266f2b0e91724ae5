//! The batch interfaces every role's loop reads and writes through, as wireguard-go's
//! `conn.Bind` and `tun.Device`: datagrams and IPv6 packets a batch at a time, with
//! whatever offloads a backend has kept inside it. The Linux backends are
//! `udp_batch` (recvmmsg/sendmmsg, GRO rows, segmented sends) and `tun_batch`
//! (virtio-net headers, super-packets); `memory` is the in-memory one tests drive a
//! role's loop with.

use std::io;
use std::net::SocketAddrV4;
use std::os::fd::BorrowedFd;

/// Where datagrams come from, a batch at a time (a socket's receive side).
pub trait DatagramInput {
    /// What a wait watches; `None` for an input no descriptor stands for (in memory),
    /// whose [`pending`](Self::pending) says instead.
    fn fd(&self) -> Option<BorrowedFd<'_>>;
    /// Whether datagrams wait that no descriptor announces.
    fn pending(&self) -> bool {
        false
    }
    /// Read until a batch comes back short or `max_batches` batches were read; each
    /// datagram is shown to `ahead` [`AHEAD`] datagrams before `f` gets it, both with
    /// `on` (what decides). Returns the datagrams handed to `f`.
    fn read<C: ?Sized>(
        &mut self,
        max_batches: usize,
        on: &mut C,
        ahead: impl Fn(&C, &[u8]),
        f: impl FnMut(&mut C, SocketAddrV4, &[u8]),
    ) -> io::Result<usize>;
}

/// How far ahead of its handling a datagram is shown: enough fetches in flight to
/// overlap their waits, few enough that the first fetched are still cached when used
/// (a whole batch of 64 ahead did worse, in the peer-table bench, than 16).
pub const AHEAD: usize = 16;

/// Where IPv6 packets come from (a TUN queue's read side).
pub trait PacketInput {
    /// As [`DatagramInput::fd`].
    fn fd(&self) -> Option<BorrowedFd<'_>>;
    /// As [`DatagramInput::pending`].
    fn pending(&self) -> bool {
        false
    }
    /// What the input is called in an error (the device's name).
    fn name(&self) -> &str;
    /// Read until empty or about `max` packets were handed to `f` (a super-packet's
    /// segments all count). Returns the packets handed.
    fn read(&mut self, max: usize, f: impl FnMut(&[u8])) -> io::Result<usize>;
}

/// Where datagrams go: queued, sent at [`flush`](Self::flush) or when the batch is full.
pub trait DatagramOutput {
    fn push(&mut self, to: SocketAddrV4, payload: &[u8]);
    fn flush(&mut self);
    /// Datagrams the kernel refused.
    fn failed(&self) -> u64;
}

/// Where IPv6 packets go: queued, written at [`flush`](Self::flush).
pub trait PacketOutput {
    fn push(&mut self, packet: &[u8]);
    fn flush(&mut self);
    /// Packets the device refused.
    fn failed(&self) -> u64;
    /// Writes that joined several packets (the offload's figure).
    fn joined_writes(&self) -> u64 {
        0
    }
}

/// A backend's four sides, named once, so that a role's daemon is written over any.
pub trait Backend {
    type DatagramsIn: DatagramInput;
    type PacketsIn: PacketInput;
    type DatagramsOut: DatagramOutput;
    type PacketsOut: PacketOutput;
}

/// The kernel's sockets and TUN queues, borrowed for `'a` (the device outlives the loop).
pub struct Linux<'a>(std::marker::PhantomData<&'a ()>);

impl<'a> Backend for Linux<'a> {
    type DatagramsIn = crate::io::udp_batch::RecvBatch;
    type PacketsIn = crate::io::tun_batch::TunInput<'a>;
    type DatagramsOut = crate::io::udp_batch::SendBatch;
    type PacketsOut = crate::io::tun_batch::TunOutput<'a>;
}
