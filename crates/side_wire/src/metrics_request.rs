//! What a scrape of the metrics endpoint asks: its request line, read from at most the
//! bytes the endpoint takes (the rest of the request is not looked at).

/// What the endpoint answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsRequest {
    /// `GET /metrics`: the metrics.
    Metrics,
    /// A GET of anything else: 404.
    NotFound,
    /// Any other method, or no request line at all: 405.
    MethodNotAllowed,
}

impl MetricsRequest {
    /// The request line of `request` (the bytes read so far).
    pub fn parse(request: &[u8]) -> MetricsRequest {
        let line = request.split(|&b| b == b'\r' || b == b'\n').next().unwrap_or_default();
        let mut words = line.split(|&b| b == b' ');
        match (words.next().unwrap_or_default(), words.next().unwrap_or_default()) {
            (b"GET", b"/metrics") => MetricsRequest::Metrics,
            (b"GET", _) => MetricsRequest::NotFound,
            _ => MetricsRequest::MethodNotAllowed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_get_of_metrics_is_one() {
        assert_eq!(MetricsRequest::parse(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), MetricsRequest::Metrics);
        assert_eq!(MetricsRequest::parse(b"GET /metrics"), MetricsRequest::Metrics);
        assert_eq!(MetricsRequest::parse(b"GET / HTTP/1.1\r\n\r\n"), MetricsRequest::NotFound);
        assert_eq!(MetricsRequest::parse(b"GET  /metrics HTTP/1.1\r\n"), MetricsRequest::NotFound);
        assert_eq!(MetricsRequest::parse(b"POST /metrics HTTP/1.1\r\n\r\n"), MetricsRequest::MethodNotAllowed);
        assert_eq!(MetricsRequest::parse(b""), MetricsRequest::MethodNotAllowed);
        assert_eq!(MetricsRequest::parse(b"\r\nGET /metrics"), MetricsRequest::MethodNotAllowed);
    }
}
