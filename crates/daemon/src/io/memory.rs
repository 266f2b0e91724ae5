//! The in-memory backend of the role loop's batch interfaces: queues a test fills and
//! reads, so that a whole role's loop runs without root, sockets or a TUN device.
//! Batches behave as the kernel's do where a role could tell: a read hands at most a
//! batch's worth, and what a role queues leaves only when it flushes.

use crate::io::batch::{Backend, DatagramInput, DatagramOutput, PacketInput, PacketOutput};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddrV4;
use std::os::fd::BorrowedFd;

/// Datagrams or packets per batch, as the daemons' own.
const BATCH: usize = 64;

/// Datagrams waiting to be read.
#[derive(Default)]
pub struct DatagramsIn {
    pub queue: VecDeque<(SocketAddrV4, Vec<u8>)>,
    /// Batches read so far (a test of the loop's bounds counts them).
    pub batches: usize,
}

impl DatagramInput for DatagramsIn {
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    fn pending(&self) -> bool {
        !self.queue.is_empty()
    }

    fn read<C: ?Sized>(
        &mut self,
        max_batches: usize,
        on: &mut C,
        ahead: impl Fn(&C, &[u8]),
        mut f: impl FnMut(&mut C, SocketAddrV4, &[u8]),
    ) -> io::Result<usize> {
        let mut total = 0;
        for _ in 0..max_batches {
            let n = self.queue.len().min(BATCH);
            self.batches += 1;
            for (from, data) in self.queue.drain(..n) {
                ahead(on, &data);
                f(on, from, &data);
                total += 1;
            }
            if n < BATCH {
                break;
            }
        }
        Ok(total)
    }
}

/// Packets waiting to be read.
#[derive(Default)]
pub struct PacketsIn {
    pub queue: VecDeque<Vec<u8>>,
}

impl PacketInput for PacketsIn {
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    fn pending(&self) -> bool {
        !self.queue.is_empty()
    }

    fn name(&self) -> &str {
        "the in-memory TUN"
    }

    fn read(&mut self, max: usize, mut f: impl FnMut(&[u8])) -> io::Result<usize> {
        let n = self.queue.len().min(max);
        self.queue.drain(..n).for_each(|p| f(&p));
        Ok(n)
    }
}

/// Datagrams a role sent: queued until it flushes, then `sent`.
#[derive(Default)]
pub struct DatagramsOut {
    queued: Vec<(SocketAddrV4, Vec<u8>)>,
    pub sent: Vec<(SocketAddrV4, Vec<u8>)>,
}

impl DatagramOutput for DatagramsOut {
    fn push(&mut self, to: SocketAddrV4, payload: &[u8]) {
        self.queued.push((to, payload.to_vec()));
    }

    fn flush(&mut self) {
        self.sent.append(&mut self.queued);
    }

    fn failed(&self) -> u64 {
        0
    }
}

/// Packets a role wrote: queued until it flushes, then `written`.
#[derive(Default)]
pub struct PacketsOut {
    queued: Vec<Vec<u8>>,
    pub written: Vec<Vec<u8>>,
}

impl PacketOutput for PacketsOut {
    fn push(&mut self, packet: &[u8]) {
        self.queued.push(packet.to_vec());
    }

    fn flush(&mut self) {
        self.written.append(&mut self.queued);
    }

    fn failed(&self) -> u64 {
        0
    }
}

/// Queues for all four sides.
pub struct Memory;

impl Backend for Memory {
    type DatagramsIn = DatagramsIn;
    type PacketsIn = PacketsIn;
    type DatagramsOut = DatagramsOut;
    type PacketsOut = PacketsOut;
}
