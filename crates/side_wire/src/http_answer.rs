//! HTTP/1.x as the UPnP client meets it: SSDP answers (HTTP over one UDP datagram),
//! the gateway's URLs, and whole HTTP answers read off a connection (status code and
//! body, chunked or not). The caller bounds what it reads (time and bytes); nothing
//! here can panic or grow past the input it is given.

use std::net::{Ipv4Addr, SocketAddrV4};

/// The LOCATION header of an SSDP answer.
pub fn ssdp_location(answer: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(answer).ok()?;
    let mut lines = text.split("\r\n");
    if !lines.next()?.starts_with("HTTP/1.1 200") {
        return None;
    }
    lines.find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.trim().eq_ignore_ascii_case("location").then(|| value.trim().to_string())
    })
}

/// `http://A.B.C.D[:port]/path` on `host`: the endpoint and the path.
pub fn http_url(url: &str, host: Ipv4Addr) -> Result<(SocketAddrV4, String), String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| format!("not an http URL: {url:.80}"))?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (ip, port) = match authority.split_once(':') {
        Some((ip, port)) => (ip, port.parse::<u16>().map_err(|_| format!("a bad port in {url:.80}"))?),
        None => (authority, 80),
    };
    let ip: Ipv4Addr = ip.parse().map_err(|_| format!("not an IPv4 address in {url:.80}"))?;
    if ip != host {
        return Err(format!("{url:.80} is not on the default gateway {host}"));
    }
    let path = if path.is_empty() { "/" } else { path };
    if !is_request_path(path) {
        return Err(format!("a path with spaces or control characters in {url:.80}"));
    }
    Ok((SocketAddrV4::new(ip, port), path.into()))
}

/// Whether `path` can go into a request line as it is: printable, no spaces.
pub fn is_request_path(path: &str) -> bool {
    path.starts_with('/') && path.bytes().all(|b| b.is_ascii_graphic())
}

/// Whether `got` holds a whole answer: its headers and the body their Content-Length
/// announces, or a chunked body's last chunk. Without either, the close ends it.
pub fn is_complete(got: &[u8]) -> bool {
    let Some(split) = got.windows(4).position(|w| w == b"\r\n\r\n") else { return false };
    let head = String::from_utf8_lossy(&got[..split]).to_ascii_lowercase();
    let body = &got[split + 4..];
    let header = |name: &str| {
        head.split("\r\n")
            .find_map(|l| l.split_once(':').filter(|(n, _)| n.trim() == name).map(|(_, v)| v.trim().to_string()))
    };
    if header("transfer-encoding").is_some_and(|v| v == "chunked") {
        return body.ends_with(b"0\r\n\r\n");
    }
    header("content-length").and_then(|v| v.parse::<usize>().ok()).is_some_and(|len| body.len() >= len)
}

/// An HTTP/1.x answer read to its end: the status code and the body (de-chunked).
pub fn parse_http(answer: &[u8]) -> Result<(u16, String), String> {
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n").ok_or("an HTTP answer without its headers' end")?;
    let head = std::str::from_utf8(&answer[..split]).map_err(|_| "HTTP headers that are not text")?;
    let body = &answer[split + 4..];
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    let code = status
        .strip_prefix("HTTP/1.")
        .and_then(|s| s.get(2..5))
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| format!("not an HTTP status line: {status:.80}"))?;
    let chunked = lines.any(|l| {
        l.split_once(':').is_some_and(|(n, v)| {
            n.trim().eq_ignore_ascii_case("transfer-encoding") && v.trim().eq_ignore_ascii_case("chunked")
        })
    });
    let body = if chunked { dechunk(body)? } else { body.to_vec() };
    Ok((code, String::from_utf8(body).map_err(|_| "a body that is not UTF-8 text")?))
}

/// A chunked body's data.
fn dechunk(mut body: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let end = body.windows(2).position(|w| w == b"\r\n").ok_or("a chunk size without its line end")?;
        let size = std::str::from_utf8(&body[..end]).ok().and_then(|s| {
            let hex = s.split(';').next()?.trim();
            usize::from_str_radix(hex, 16).ok()
        });
        let size = size.ok_or("a bad chunk size")?;
        body = &body[end + 2..];
        if size == 0 {
            return Ok(out);
        }
        let chunk = body.get(..size).ok_or("a chunk past the end")?;
        out.extend_from_slice(chunk);
        body = body.get(size + 2..).ok_or("a chunk without its line end")?;
    }
}
