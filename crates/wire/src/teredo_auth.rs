//! The Teredo authentication encapsulation (indicator 0x0001, RFC 4380 §5.1.1).
//!
//! ```text
//! 00 01 | ID-len | AU-len | client id (ID-len) | auth value (AU-len) | nonce (8) | confirmation (1)
//! ```
//! ID-len and AU-len are 0 without secure qualification; the nonce and confirmation
//! are always there. It must come before an origin indication.

use crate::{Error, Result};

/// Length of the header with empty client id and auth value.
pub const MIN_LEN: usize = 13;
/// Length of the nonce.
pub const NONCE_LEN: usize = 8;

/// A view over an authentication header at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AuthHeader<T> {
    /// Wrap a buffer without checking it; accessors may panic until checked.
    pub const fn new_unchecked(buffer: T) -> Self {
        AuthHeader { buffer }
    }

    /// Wrap an untrusted buffer: after this succeeds no accessor can panic.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let h = Self::new_unchecked(buffer);
        h.check_len()?;
        Ok(h)
    }

    /// Check the indicator and that the variable parts fit in the buffer.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < 2 {
            return Err(Error::Truncated);
        }
        if b[..2] != [0, 1] {
            return Err(Error::BadIndicator);
        }
        if b.len() < MIN_LEN || b.len() < self.header_len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Client identifier length.
    pub fn id_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[2])
    }
    /// Authentication value length.
    pub fn au_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[3])
    }
    /// Total length of the header.
    pub fn header_len(&self) -> usize {
        MIN_LEN + self.id_len() + self.au_len()
    }
    /// Client identifier.
    pub fn client_id(&self) -> &[u8] {
        &self.buffer.as_ref()[4..4 + self.id_len()]
    }
    /// Authentication value (the MAC).
    pub fn auth_value(&self) -> &[u8] {
        let at = 4 + self.id_len();
        &self.buffer.as_ref()[at..at + self.au_len()]
    }
    /// The nonce.
    pub fn nonce(&self) -> [u8; NONCE_LEN] {
        let at = 4 + self.id_len() + self.au_len();
        let mut n = [0u8; NONCE_LEN];
        n.copy_from_slice(&self.buffer.as_ref()[at..at + NONCE_LEN]);
        n
    }
    /// The confirmation byte (non-zero from a server: the client's key is stale).
    pub fn confirmation(&self) -> u8 {
        self.buffer.as_ref()[self.header_len() - 1]
    }
}

/// A parsed authentication header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthRepr<'a> {
    /// Client identifier (at most 255 bytes).
    pub client_id: &'a [u8],
    /// Authentication value (at most 255 bytes).
    pub auth_value: &'a [u8],
    /// Nonce.
    pub nonce: [u8; NONCE_LEN],
    /// Confirmation byte.
    pub confirmation: u8,
}

impl<'a> AuthRepr<'a> {
    /// A header carrying only a nonce, as in an RS without secure qualification.
    pub const fn with_nonce(nonce: [u8; NONCE_LEN]) -> Self {
        AuthRepr { client_id: &[], auth_value: &[], nonce, confirmation: 0 }
    }

    /// Parse a checked header.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &AuthHeader<&'a T>) -> Self {
        let b: &'a [u8] = h.buffer.as_ref();
        let (id, au) = (h.id_len(), h.au_len());
        AuthRepr {
            client_id: &b[4..4 + id],
            auth_value: &b[4 + id..4 + id + au],
            nonce: h.nonce(),
            confirmation: h.confirmation(),
        }
    }

    /// Bytes the header needs.
    pub fn buffer_len(&self) -> usize {
        MIN_LEN + self.client_id.len() + self.auth_value.len()
    }

    /// Write the header at the start of `buf`; returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let id = u8::try_from(self.client_id.len()).map_err(|_| Error::BadLength)?;
        let au = u8::try_from(self.auth_value.len()).map_err(|_| Error::BadLength)?;
        let len = self.buffer_len();
        let b = buf.get_mut(..len).ok_or(Error::BufferTooSmall)?;
        b[..4].copy_from_slice(&[0, 1, id, au]);
        let mut at = 4;
        for part in [self.client_id, self.auth_value, &self.nonce[..]] {
            b[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        b[at] = self.confirmation;
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonce_only_header() {
        let repr = AuthRepr::with_nonce([1, 2, 3, 4, 5, 6, 7, 8]);
        let mut b = [0u8; 13];
        assert_eq!(repr.emit(&mut b).unwrap(), 13);
        assert_eq!(b, [0, 1, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0]);
        let h = AuthHeader::new_checked(&b[..]).unwrap();
        assert_eq!(AuthRepr::parse(&h), repr);
    }

    #[test]
    fn secure_header_round_trip() {
        let repr = AuthRepr { client_id: b"alice", auth_value: &[0xaa; 20], nonce: [9; 8], confirmation: 1 };
        let mut b = [0u8; 64];
        let n = repr.emit(&mut b).unwrap();
        assert_eq!(n, 13 + 5 + 20);
        let h = AuthHeader::new_checked(&b[..n]).unwrap();
        assert_eq!(h.client_id(), b"alice");
        assert_eq!(h.confirmation(), 1);
        assert_eq!(AuthRepr::parse(&h), repr);
    }

    #[test]
    fn lengths_past_the_end_are_refused() {
        // Case 4: ID-len 200 in a 60-byte datagram.
        let mut b = [0u8; 60];
        b[1] = 1;
        b[2] = 200;
        assert_eq!(AuthHeader::new_checked(&b[..]).unwrap_err(), Error::Truncated);
        assert_eq!(AuthHeader::new_checked(&b[..12]).unwrap_err(), Error::Truncated);
        b[1] = 0;
        assert_eq!(AuthHeader::new_checked(&b[..]).unwrap_err(), Error::BadIndicator);
    }
}
