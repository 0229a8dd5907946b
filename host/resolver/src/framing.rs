//! Refuses HTTP/1 requests whose framing two parsers could read differently, the stuff of
//! request smuggling: a request with both `Content-Length` and `Transfer-Encoding`, or with more
//! than one `Content-Length` field (equal values or not), gets 400 and its connection closes
//! (RFC 9112 §6.1 and §6.3 allow a server to refuse them; it must not guess).
//!
//! hyper refuses differing `Content-Length` values itself, but reads a request with both fields
//! by `Transfer-Encoding` and equal repeated lengths as one, and drops the extra fields before
//! the proxy sees the request. So the check sits under hyper: [`Framing`] wraps the socket of an
//! HTTP/1 connection and follows the framing of the request stream as hyper reads it (heads,
//! then bodies by `Content-Length` or chunked), looking only at the field names of each head and
//! skipping bodies by their length. When a head is ambiguous, it turns the head's last line
//! break into a byte no HTTP/1 parser accepts, before hyper sees it: hyper's own parse error
//! answers 400 and closes the connection, and nothing of the request is forwarded.
//!
//! A connection that starts with the HTTP/2 preface is not looked at (h2c frames its data
//! itself). Input that hyper refuses anyway may be followed loosely: hyper closes the
//! connection then.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::metrics;

/// The HTTP/2 connection preface (RFC 9113 §3.4): what an h2c client with prior knowledge
/// sends first.
pub(crate) const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The longest field name that matters, `transfer-encoding`.
const NAME_MAX: usize = 17;

/// A socket whose incoming HTTP/1 requests are checked for ambiguous framing.
#[derive(Debug)]
pub(crate) struct Framing<T> {
    io: T,
    state: State,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// At the start of the connection, so many bytes of the HTTP/2 preface seen so far.
    Preface(u8),
    /// In a request head.
    Head(Head),
    /// In a body of known length: the bytes left.
    Body(u64),
    /// In a chunked body.
    Chunked(Chunk),
    /// HTTP/2, or a head already refused: nothing more to check.
    Off,
}

/// What a request head has said so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Head {
    /// The request line has begun (empty lines before it are skipped, as hyper does).
    started: bool,
    /// Bytes of the current line so far, CRs not counted.
    line: usize,
    /// The current field's name, lower-cased, while it is read (`NAME_MAX` bytes at most).
    name: [u8; NAME_MAX],
    /// Bytes of the name so far; more than `NAME_MAX` means another field.
    name_len: usize,
    /// What the current line is.
    field: Field,
    /// `Content-Length` fields seen.
    content_lengths: u8,
    /// The first `Content-Length`'s value (saturating; hyper refuses what is not a number).
    length: u64,
    /// A `Transfer-Encoding` field was seen: the body is chunked (hyper refuses other codings).
    chunked: bool,
}

/// The kind of the current line of a head.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Field {
    /// The request line, or a field whose name is still being read.
    #[default]
    Name,
    /// The value of the first `Content-Length`.
    Length,
    /// Anything else, to the end of the line.
    Other,
}

/// Where a chunked body is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunk {
    /// Reading the hex digits of a chunk's size.
    Size(u64),
    /// The rest of the size line (extensions, CRLF); then this size.
    SizeLine(u64),
    /// Chunk data: the bytes left.
    Data(u64),
    /// The line break after chunk data.
    DataEnd,
    /// Trailer fields after the last chunk: bytes of the current line, CRs not counted.
    Trailers(usize),
}

impl<T> Framing<T> {
    /// Checks the requests read from `io`.
    pub(crate) fn new(io: T) -> Self {
        Self {
            io,
            state: State::Preface(0),
        }
    }
}

/// Follows the request stream over `bytes`, just read; makes an ambiguous head unparsable.
/// Returns whether it did.
fn scan(state: &mut State, bytes: &mut [u8]) -> bool {
    let mut i = 0;
    while i < bytes.len() {
        match state {
            State::Off => return false,
            State::Preface(seen) => {
                let n = usize::from(*seen);
                if bytes[i] == H2_PREFACE[n] {
                    *seen += 1;
                    i += 1;
                    if usize::from(*seen) == H2_PREFACE.len() {
                        *state = State::Off;
                    }
                } else {
                    // HTTP/1 after all: what matched of the preface is where it starts (it
                    // holds no field, so nothing in it can be refused).
                    let mut replay = *H2_PREFACE;
                    *state = State::Head(Head::default());
                    scan(state, &mut replay[..n]);
                }
            }
            State::Head(head) => {
                let b = bytes[i];
                if let Some(next) = head.byte(b) {
                    if head.ambiguous() {
                        // The head's final line break; hyper has not seen it yet.
                        bytes[i] = 0;
                        metrics::rejected("", "", "ambiguous_framing");
                        tracing::debug!(
                            content_lengths = head.content_lengths,
                            transfer_encoding = head.chunked,
                            "refusing a request with ambiguous framing (400)"
                        );
                        *state = State::Off;
                        return true;
                    }
                    *state = next;
                }
                i += 1;
            }
            State::Body(left) => {
                let take = (bytes.len() - i).min(usize::try_from(*left).unwrap_or(usize::MAX));
                i += take;
                *left -= take as u64;
                if *left == 0 {
                    *state = State::Head(Head::default());
                }
            }
            State::Chunked(chunk) => match chunk {
                Chunk::Data(left) => {
                    let take = (bytes.len() - i).min(usize::try_from(*left).unwrap_or(usize::MAX));
                    i += take;
                    *left -= take as u64;
                    if *left == 0 {
                        *chunk = Chunk::DataEnd;
                    }
                }
                _ => {
                    *state = chunk.byte(bytes[i]);
                    i += 1;
                }
            },
        }
    }
    false
}

impl Head {
    /// Takes one byte of the head; at its end, the state that follows it.
    fn byte(&mut self, b: u8) -> Option<State> {
        if b == b'\n' {
            return self.end_of_line();
        }
        if b == b'\r' {
            return None;
        }
        self.line += 1;
        if !self.started {
            return None;
        }
        match self.field {
            Field::Name if b == b':' => {
                let name = &self.name[..self.name_len.min(NAME_MAX)];
                self.field = if self.name_len > NAME_MAX {
                    Field::Other
                } else if name == b"content-length" {
                    self.content_lengths = self.content_lengths.saturating_add(1);
                    if self.content_lengths == 1 {
                        Field::Length
                    } else {
                        Field::Other
                    }
                } else {
                    if name == b"transfer-encoding" {
                        self.chunked = true;
                    }
                    Field::Other
                };
            }
            Field::Name => {
                if self.name_len < NAME_MAX {
                    self.name[self.name_len] = b.to_ascii_lowercase();
                }
                self.name_len += 1;
            }
            Field::Length => {
                if b.is_ascii_digit() {
                    self.length = self
                        .length
                        .saturating_mul(10)
                        .saturating_add(u64::from(b - b'0'));
                }
            }
            Field::Other => {}
        }
        None
    }

    fn end_of_line(&mut self) -> Option<State> {
        let empty = self.line == 0;
        self.line = 0;
        self.name_len = 0;
        self.field = Field::Name;
        if !self.started {
            // The request line ends here, or an empty line before it is skipped.
            self.started = !empty;
            return None;
        }
        if !empty {
            return None;
        }
        Some(if self.chunked {
            State::Chunked(Chunk::Size(0))
        } else if self.length > 0 {
            State::Body(self.length)
        } else {
            State::Head(Head::default())
        })
    }

    /// Whether two parsers could frame the request differently.
    fn ambiguous(&self) -> bool {
        self.content_lengths > 1 || (self.content_lengths > 0 && self.chunked)
    }
}

impl Chunk {
    /// Takes one byte of a chunked body outside chunk data.
    fn byte(self, b: u8) -> State {
        let next = match self {
            Chunk::Size(size) => match char::from(b).to_digit(16) {
                Some(d) => Chunk::Size(size.saturating_mul(16).saturating_add(u64::from(d))),
                None => return Chunk::SizeLine(size).byte(b),
            },
            Chunk::SizeLine(size) if b == b'\n' => {
                if size == 0 {
                    Chunk::Trailers(0)
                } else {
                    Chunk::Data(size)
                }
            }
            Chunk::DataEnd if b == b'\n' => Chunk::Size(0),
            Chunk::Trailers(line) if b == b'\n' => {
                if line == 0 {
                    return State::Head(Head::default());
                }
                Chunk::Trailers(0)
            }
            Chunk::Trailers(line) if b != b'\r' => Chunk::Trailers(line + 1),
            other => other,
        };
        State::Chunked(next)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Framing<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if this.state != State::Off {
            scan(&mut this.state, &mut buf.filled_mut()[before..]);
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Framing<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scans `input` in pieces of `step` bytes; the bytes as hyper would get them, and whether a
    /// head was refused.
    fn split_scan(input: &[u8], step: usize) -> (Vec<u8>, bool) {
        let mut state = State::Preface(0);
        let mut out = input.to_vec();
        let mut refused = false;
        for piece in out.chunks_mut(step) {
            refused |= scan(&mut state, piece);
        }
        (out, refused)
    }

    fn refused(input: &str) -> bool {
        let results: Vec<bool> = [1, 2, 7, input.len()]
            .iter()
            .map(|&step| split_scan(input.as_bytes(), step).1)
            .collect();
        assert!(
            results.iter().all(|r| *r == results[0]),
            "the same at every split: {input:?}"
        );
        results[0]
    }

    #[test]
    fn ambiguous_heads_are_refused_and_made_unparsable() {
        for head in [
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
            "POST / HTTP/1.1\r\ncontent-length: 5\r\nCONTENT-LENGTH: 6\r\n\r\n",
            "POST / HTTP/1.1\nContent-Length: 5\nTransfer-Encoding: gzip, chunked\n\n",
            "PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length:0\r\n\r\n",
        ] {
            assert!(refused(head), "{head:?}");
            let (out, _) = split_scan(head.as_bytes(), 3);
            assert_eq!(out[..out.len() - 1], head.as_bytes()[..head.len() - 1]);
            assert_eq!(out.last(), Some(&0), "the final line break is spoilt");
        }
    }

    #[test]
    fn well_framed_streams_pass_unchanged_across_bodies_and_pipelining() {
        let stream = concat!(
            "\r\nGET /a HTTP/1.1\r\nHost: a\r\nX-Content-Length: 1\r\n\r\n",
            // A body that looks like heads is skipped by its length.
            "POST /b HTTP/1.1\r\nContent-Length: 43\r\n\r\n",
            "Content-Length: 1\r\nTransfer-Encoding: x\r\n\r\n",
            // Chunks with an extension, data that looks like a head, and trailers.
            "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "1a;ext=1\r\nContent-Length: 1\r\n\r\nxxxxx\r\n",
            "0\r\nX-Trailer: 1\r\nContent-Length: 9\r\n\r\n",
            "GET /d HTTP/1.1\r\nContent-Length: 0\r\nHost: a\r\n\r\n",
            "GET /e HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        );
        for step in [1, 2, 5, 64, stream.len()] {
            let (out, refused) = split_scan(stream.as_bytes(), step);
            assert!(!refused, "split every {step}");
            assert_eq!(out, stream.as_bytes());
        }
        // The refusal still applies after all that.
        let mut more = stream.to_owned();
        more.push_str("GET /f HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx");
        assert!(refused(&more));
    }

    #[test]
    fn the_h2c_preface_turns_the_check_off_and_a_near_miss_is_http1() {
        let mut h2 = H2_PREFACE.to_vec();
        h2.extend_from_slice(b"Content-Length: 1\r\nContent-Length: 1\r\n\r\n");
        let (out, spoilt) = split_scan(&h2, 5);
        assert!(!spoilt);
        assert_eq!(out, h2);
        assert!(refused(
            "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n"
        ));
        assert!(refused(
            "PRI / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n"
        ));
    }
}
