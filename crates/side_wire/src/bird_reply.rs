//! One line of BIRD's answers on its control socket (the protocol `birdc` speaks): a
//! four-digit code, then `-` while more lines follow or a space on the last one, then
//! text; a line that goes on with the previous code's text starts with a space instead.
//! The relay reads BIRD's answers to "enable" and "disable" (see the daemon's
//! `io/bird.rs`); whatever is at the other end of the socket, no line can make the
//! parser panic, and what is not one of BIRD's is refused.

/// A line that is not one of BIRD's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAReplyLine;

type Result<T> = core::result::Result<T, NotAReplyLine>;

/// A line of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyLine<'a> {
    /// The code (0 to 9999), or `None` on a continuation line.
    pub code: Option<u16>,
    /// More lines of this answer follow.
    pub more: bool,
    /// The text, without the code and its separator (and without the line's end).
    pub text: &'a str,
}

impl ReplyLine<'_> {
    /// Codes 8xxx (run-time errors) and 9xxx (parse errors) say BIRD refused.
    pub fn is_error(&self) -> bool {
        self.code.is_some_and(|c| c >= 8000)
    }
}

/// Parse one line (its `\n` already taken off, or not).
pub fn parse_line(line: &[u8]) -> Result<ReplyLine<'_>> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    fn text(b: &[u8]) -> Result<&str> {
        core::str::from_utf8(b).map_err(|_| NotAReplyLine)
    }
    let digits = |b: &[u8]| b.iter().all(u8::is_ascii_digit);
    let code = |b: &[u8]| b.iter().fold(0u16, |acc, d| acc * 10 + u16::from(d - b'0'));
    match line {
        c if c.len() == 4 && digits(c) => Ok(ReplyLine { code: Some(code(c)), more: false, text: "" }),
        [a, b, c, d, sep @ (b'-' | b' '), rest @ ..] if digits(&[*a, *b, *c, *d]) => {
            Ok(ReplyLine { code: Some(code(&[*a, *b, *c, *d])), more: *sep == b'-', text: text(rest)? })
        }
        [b' ', rest @ ..] => Ok(ReplyLine { code: None, more: true, text: text(rest)? }),
        _ => Err(NotAReplyLine),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn birds_lines() {
        let l = parse_line(b"0001 BIRD 2.0.12 ready.\n").unwrap();
        assert_eq!(l, ReplyLine { code: Some(1), more: false, text: "BIRD 2.0.12 ready." });
        let l = parse_line(b"0011-teredo: enabled").unwrap();
        assert_eq!((l.code, l.more, l.text), (Some(11), true, "teredo: enabled"));
        assert_eq!(parse_line(b"0000").unwrap(), ReplyLine { code: Some(0), more: false, text: "" });
        assert_eq!(parse_line(b" more text").unwrap(), ReplyLine { code: None, more: true, text: "more text" });
        assert!(parse_line(b"9001 syntax error").unwrap().is_error());
        assert!(!parse_line(b"0013 ok").unwrap().is_error());
    }

    #[test]
    fn what_is_not_birds_is_refused_without_a_panic() {
        // A multi-byte character where the separator goes (the old parser sliced it).
        for bad in [&b"0011\xc3\xa9 x"[..], b"0011\xff", b"001", b"abcd x", b"0011x", b"", b"0011 \xff"] {
            assert_eq!(parse_line(bad), Err(NotAReplyLine), "{bad:?}");
        }
    }
}
