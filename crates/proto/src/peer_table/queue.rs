//! The packets a peer's entry holds while its bubbles are out: in order, bounded in
//! bytes, one allocation per waiting peer (released when the queue drains).

/// Packets waiting for a peer's bubble exchange, in order, bounded in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PacketQueue {
    /// Length-prefixed packets (u16 big-endian length, then the bytes).
    buf: Vec<u8>,
    packets: usize,
}

/// The empty queue an entry without one shows.
pub(super) static EMPTY: PacketQueue = PacketQueue { buf: Vec::new(), packets: 0 };

impl PacketQueue {
    /// Append `packet` unless that would take the queue past `cap` bytes of packets.
    pub fn push(&mut self, packet: &[u8], cap: usize) -> bool {
        let used = self.buf.len() - 2 * self.packets;
        if packet.len() > u16::MAX as usize || used + packet.len() > cap {
            return false;
        }
        self.buf.extend_from_slice(&(packet.len() as u16).to_be_bytes());
        self.buf.extend_from_slice(packet);
        self.packets += 1;
        true
    }

    /// Number of queued packets.
    pub fn len(&self) -> usize {
        self.packets
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.packets == 0
    }

    /// Bytes of packet data queued.
    pub fn bytes(&self) -> usize {
        self.buf.len() - 2 * self.packets
    }

    /// The oldest queued packet, left in place.
    pub fn first(&self) -> Option<&[u8]> {
        let len = usize::from(u16::from_be_bytes([*self.buf.first()?, *self.buf.get(1)?]));
        self.buf.get(2..2 + len)
    }

    /// Take every packet out, in order, releasing the memory.
    pub fn drain(&mut self) -> QueueDrain {
        self.packets = 0;
        QueueDrain { buf: std::mem::take(&mut self.buf), at: 0 }
    }
}

/// The packets taken out of a queue.
#[derive(Debug)]
pub struct QueueDrain {
    buf: Vec<u8>,
    at: usize,
}

impl QueueDrain {
    /// The next packet.
    pub fn next_packet(&mut self) -> Option<&[u8]> {
        let len = usize::from(u16::from_be_bytes([*self.buf.get(self.at)?, *self.buf.get(self.at + 1)?]));
        let p = self.buf.get(self.at + 2..self.at + 2 + len)?;
        self.at += 2 + len;
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_is_bounded_and_ordered() {
        let mut q = PacketQueue::default();
        assert!(q.push(&[1; 600], 1280));
        assert!(q.push(&[2; 600], 1280));
        assert!(!q.push(&[3; 600], 1280), "third packet exceeds the cap");
        assert_eq!((q.len(), q.bytes()), (2, 1200));
        assert_eq!(q.first().unwrap()[0], 1);
        let mut d = q.drain();
        assert_eq!(d.next_packet().unwrap()[0], 1);
        assert_eq!(d.next_packet().unwrap()[0], 2);
        assert!(d.next_packet().is_none());
        assert!(q.is_empty());
    }
}
