//! The Teredo authentication encapsulation (indicator 0x0001, RFC 4380 §5.1.1).
//!
//! ```text
//! 00 01 | ID-len | AU-len | client id (ID-len) | auth value (AU-len) | nonce (8) | confirmation (1)
//! ```
//! ID-len and AU-len are 0 without secure qualification; the nonce and confirmation
//! are always there. It must come before an origin indication.

use crate::{Error, Result};

pub(crate) mod field {
    #![allow(non_snake_case)]
    use crate::field::*;

    pub const INDICATOR: Field = 0..2;
    pub const ID_LEN: usize = 2;
    pub const AU_LEN: usize = 3;

    // The rest lies after the client identifier and the authentication value, whose
    // lengths the header gives.
    pub const fn CLIENT_ID(id_len: usize) -> Field {
        AU_LEN + 1..AU_LEN + 1 + id_len
    }
    pub const fn AUTH_VALUE(id_len: usize, au_len: usize) -> Field {
        let at = CLIENT_ID(id_len).end;
        at..at + au_len
    }
    pub const fn NONCE(id_len: usize, au_len: usize) -> Field {
        let at = AUTH_VALUE(id_len, au_len).end;
        at..at + super::NONCE_LEN
    }
    pub const fn CONFIRMATION(id_len: usize, au_len: usize) -> usize {
        NONCE(id_len, au_len).end
    }
}

/// The first two bytes of an authentication header.
pub const INDICATOR: [u8; 2] = [0, 1];
/// Length of the header with empty client id and auth value.
pub const MIN_LEN: usize = field::CONFIRMATION(0, 0) + 1;
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
        if b.get(field::INDICATOR).ok_or(Error::Truncated)? != INDICATOR {
            return Err(Error::BadIndicator);
        }
        if b.len() < MIN_LEN || b.len() < self.header_len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Client identifier length.
    pub fn id_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::ID_LEN])
    }
    /// Authentication value length.
    pub fn au_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::AU_LEN])
    }
    /// Total length of the header.
    pub fn header_len(&self) -> usize {
        field::CONFIRMATION(self.id_len(), self.au_len()) + 1
    }
    /// Client identifier.
    pub fn client_id(&self) -> &[u8] {
        &self.buffer.as_ref()[field::CLIENT_ID(self.id_len())]
    }
    /// Authentication value (the MAC).
    pub fn auth_value(&self) -> &[u8] {
        &self.buffer.as_ref()[field::AUTH_VALUE(self.id_len(), self.au_len())]
    }
    /// The nonce.
    pub fn nonce(&self) -> [u8; NONCE_LEN] {
        let mut n = [0u8; NONCE_LEN];
        n.copy_from_slice(&self.buffer.as_ref()[field::NONCE(self.id_len(), self.au_len())]);
        n
    }
    /// The confirmation byte (non-zero from a server: the client's key is stale).
    pub fn confirmation(&self) -> u8 {
        self.buffer.as_ref()[field::CONFIRMATION(self.id_len(), self.au_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AuthHeader<T> {
    /// Write the indicator.
    pub fn set_indicator(&mut self) {
        self.buffer.as_mut()[field::INDICATOR].copy_from_slice(&INDICATOR);
    }
    /// Set the client identifier length; the fields after it move.
    pub fn set_id_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::ID_LEN] = v;
    }
    /// Set the authentication value length; the fields after it move.
    pub fn set_au_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::AU_LEN] = v;
    }
    /// Mutable client identifier.
    pub fn client_id_mut(&mut self) -> &mut [u8] {
        let range = field::CLIENT_ID(self.id_len());
        &mut self.buffer.as_mut()[range]
    }
    /// Mutable authentication value: where a MAC is signed in.
    pub fn auth_value_mut(&mut self) -> &mut [u8] {
        let range = field::AUTH_VALUE(self.id_len(), self.au_len());
        &mut self.buffer.as_mut()[range]
    }
    /// Set the nonce.
    pub fn set_nonce(&mut self, nonce: &[u8; NONCE_LEN]) {
        let range = field::NONCE(self.id_len(), self.au_len());
        self.buffer.as_mut()[range].copy_from_slice(nonce);
    }
    /// Set the confirmation byte.
    pub fn set_confirmation(&mut self, v: u8) {
        let at = field::CONFIRMATION(self.id_len(), self.au_len());
        self.buffer.as_mut()[at] = v;
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
        // Sliced here rather than through the getters, which borrow the view and not
        // the buffer it wraps.
        let b: &'a [u8] = h.buffer.as_ref();
        let (id, au) = (h.id_len(), h.au_len());
        AuthRepr {
            client_id: &b[field::CLIENT_ID(id)],
            auth_value: &b[field::AUTH_VALUE(id, au)],
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
        let mut h = AuthHeader::new_unchecked(buf.get_mut(..len).ok_or(Error::BufferTooSmall)?);
        h.set_indicator();
        h.set_id_len(id);
        h.set_au_len(au);
        h.client_id_mut().copy_from_slice(self.client_id);
        h.auth_value_mut().copy_from_slice(self.auth_value);
        h.set_nonce(&self.nonce);
        h.set_confirmation(self.confirmation);
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
    fn auth_value_is_written_in_place() {
        // Where a signer puts the MAC: after the client identifier, before the nonce.
        let repr = AuthRepr { client_id: b"bob", auth_value: &[0; 4], nonce: [9; 8], confirmation: 0 };
        let mut b = [0u8; 20];
        let n = repr.emit(&mut b).unwrap();
        AuthHeader::new_unchecked(&mut b[..n]).auth_value_mut().copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(b[..n], [0, 1, 3, 4, b'b', b'o', b'b', 1, 2, 3, 4, 9, 9, 9, 9, 9, 9, 9, 9, 0]);
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
