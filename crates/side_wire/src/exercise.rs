//! Harnesses that drive every parser over arbitrary bytes and check what was parsed.
//! Shared by the bounded property tests (run on every `cargo test`) and the cargo-fuzz
//! targets in `fuzz/`. Each function panics only when an oracle fails — a parser
//! panicking by itself is the bug being hunted.

use crate::helper_request::{self, Request, REQUEST_LEN};
use crate::http_answer;
use crate::metrics_request::MetricsRequest;
use crate::upnp_description;
use std::net::Ipv4Addr;

/// BIRD answer lines: parsing never panics; a line that parses has a code below 10 000
/// or none, and its text is a part of the line.
pub fn bird_reply(data: &[u8]) {
    let Ok(l) = crate::bird_reply::parse_line(data) else { return };
    assert!(l.code.is_none_or(|c| c < 10_000));
    assert!(l.text.len() <= data.len());
    assert!(data.windows(l.text.len().max(1)).any(|w| l.text.is_empty() || w == l.text.as_bytes()));
}

/// The interface helper's requests: a request the helper takes is 24 bytes, under the
/// Teredo prefix it was asked for, with an MTU in range, and encodes back to the same
/// bytes; answers decode without panicking, and an answer encoded decodes to itself.
pub fn helper_request(data: &[u8]) {
    let prefix = 0x2001_0000;
    if let Ok(r) = Request::decode(data, prefix) {
        assert_eq!(data.len(), REQUEST_LEN);
        assert_eq!(&r.encode()[..], data, "a request taken encodes back to its bytes");
        if let Request::Up { address, mtu } = r {
            assert_eq!(address.octets()[..4], prefix.to_be_bytes());
            assert!((1280..=65535).contains(&mtu));
        }
    }
    let _ = helper_request::decode_reply(data);
    let text = String::from_utf8_lossy(data).into_owned();
    let encoded = helper_request::encode_reply(&Err(text.clone()));
    assert!(encoded.len() <= 1 + helper_request::REPLY_TEXT_MAX);
    let back = helper_request::decode_reply(&encoded).unwrap_err();
    assert!(text.starts_with(&back), "a reply's text is the start of what was said");
}

/// A scrape's request line: whatever the bytes, one of the three answers, and only a
/// line starting `GET /metrics` gets the metrics.
pub fn metrics_request(data: &[u8]) {
    let r = MetricsRequest::parse(data);
    assert_eq!(
        r == MetricsRequest::Metrics,
        data.starts_with(b"GET /metrics") && {
            let rest = &data[b"GET /metrics".len()..];
            rest.first().is_none_or(|b| matches!(b, b' ' | b'\r' | b'\n'))
        }
    );
}

/// A gateway's answers: an SSDP answer's LOCATION is text from the answer; an HTTP
/// answer's body is no longer than the answer; a URL taken is on the gateway and its
/// path fits a request line; a description's walk stays within its depth bound.
pub fn ssdp_answer(data: &[u8]) {
    let gateway = Ipv4Addr::new(192, 168, 1, 1);
    if let Some(location) = http_answer::ssdp_location(data) {
        assert!(location.len() <= data.len());
        if let Ok((at, path)) = http_answer::http_url(&location, gateway) {
            assert_eq!(*at.ip(), gateway);
            assert!(http_answer::is_request_path(&path));
        }
    }
    let _ = http_answer::is_complete(data);
    if let Ok((code, body)) = http_answer::parse_http(data) {
        assert!(code < 1000, "three digits");
        assert!(body.len() <= data.len());
        if let Ok((control, service)) = upnp_description::control_url(&body) {
            assert!(upnp_description::SERVICES.contains(&service.as_str()));
            assert!(!control.is_empty());
        }
        let _ = upnp_description::element_text(&body, "NewExternalIPAddress");
    }
}
