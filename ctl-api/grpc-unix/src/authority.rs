//! Any `:authority` on a unix socket: HTTP/2 requests pass through [`LenientAuthority`] between
//! the accepted stream (after TLS, where there is TLS) and tonic's HTTP/2 server.
//!
//! gRPC C-core clients (Python grpcio ≥ 1.57, grpc-java, grpcurl, Swift, …) put the socket path
//! — percent-encoded or not — in `:authority` when they dial a unix socket. hyper's h2 (under
//! tonic) parses the pseudo-header as a URI authority and answers such a request with
//! `RST_STREAM PROTOCOL_ERROR`, so those clients cannot call Quiver at all. An authority names
//! nothing on a unix socket; this layer replaces one h2 would refuse with `localhost` (what
//! NSM's Go clients send) and leaves every other header as it was.
//!
//! How: the client's side of the connection is read frame by frame. Frames other than HEADERS
//! and CONTINUATION are passed on byte for byte as they arrive. Each header block is decoded
//! with the client's HPACK state and written again as literals that never enter the dynamic
//! table, so h2's decoder keeps an empty table and the two HPACK states cannot drift apart.
//! The server's side of the connection is not touched.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use loona_hpack::encoder::encode_integer_into;
use loona_hpack::Decoder;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::codegen::http::uri::Authority;
use tonic::transport::server::Connected;

/// The authority written in place of one h2 would refuse.
pub const UNIX_AUTHORITY: &str = "localhost";

/// The client connection preface (RFC 9113 §3.4), passed on as it is.
const PREFACE_LEN: usize = 24;
/// An HTTP/2 frame header: length (24 bits), type, flags, stream id.
const FRAME_HEADER_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;
/// Frames written never exceed the smallest SETTINGS_MAX_FRAME_SIZE a server may have.
const MAX_FRAME_PAYLOAD: usize = 16_384;
/// A header block (HEADERS and its CONTINUATIONs) larger than this closes the connection;
/// gRPC metadata is far smaller, and h2 would refuse such a block anyway.
const MAX_HEADER_BLOCK: usize = 1 << 20;
/// The largest HPACK dynamic table a client may ask for with a size update.
const MAX_DYNAMIC_TABLE: usize = 64 * 1024;
/// Bytes read from the inner stream at a time.
const READ_CHUNK: usize = 16 * 1024;

/// A server-side stream whose client requests reach the HTTP/2 server with an `:authority` it
/// accepts (see the module docs). Writes go to the inner stream untouched.
pub struct LenientAuthority<S> {
    inner: S,
    rewriter: Rewriter,
    /// Rewritten bytes not yet handed to the reader, from `ready_at` on.
    ready: Vec<u8>,
    ready_at: usize,
    eof: bool,
}

impl<S> LenientAuthority<S> {
    /// Wraps an accepted connection.
    pub fn new(inner: S) -> Self {
        LenientAuthority {
            inner,
            rewriter: Rewriter::new(),
            ready: Vec::new(),
            ready_at: 0,
            eof: false,
        }
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// How many request authorities were replaced on this connection.
    pub fn replaced(&self) -> u64 {
        self.rewriter.replaced
    }
}

impl<S: Connected> Connected for LenientAuthority<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for LenientAuthority<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.ready_at < this.ready.len() {
                let n = buf.remaining().min(this.ready.len() - this.ready_at);
                buf.put_slice(&this.ready[this.ready_at..this.ready_at + n]);
                this.ready_at += n;
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            this.ready.clear();
            this.ready_at = 0;
            let mut chunk = [0u8; READ_CHUNK];
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) if read.filled().is_empty() => this.eof = true,
                Poll::Ready(Ok(())) => this
                    .rewriter
                    .feed(read.filled(), &mut this.ready)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?,
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for LenientAuthority<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Why a client's bytes could not be rewritten; the connection closes (h2 would close it with
/// a connection error for each of these too).
#[derive(Debug, thiserror::Error)]
pub enum RewriteError {
    /// A header block too large to hold.
    #[error("a header block of more than {MAX_HEADER_BLOCK} bytes")]
    HeaderBlockTooLarge,
    /// A frame other than CONTINUATION on the stream in the middle of a header block.
    #[error("frame type {0:#x} inside a header block")]
    InterruptedHeaderBlock(u8),
    /// CONTINUATION without a header block to continue.
    #[error("CONTINUATION without HEADERS")]
    StrayContinuation,
    /// Padding or priority fields longer than the frame.
    #[error("a HEADERS frame shorter than its padding and priority fields")]
    MalformedHeaders,
    /// The block does not decode as HPACK.
    #[error("bad HPACK in a header block: {0}")]
    Hpack(String),
}

/// The frame-by-frame rewriter, without I/O: bytes from the client in, bytes for the server out.
pub struct Rewriter {
    decoder: Decoder<'static>,
    preface_left: usize,
    /// Bytes of the current frame (not a header-block frame) still to pass through.
    passthrough_left: usize,
    /// The frame being collected: its header first, then, for HEADERS or CONTINUATION, its payload.
    frame: Vec<u8>,
    block: Option<HeaderBlock>,
    replaced: u64,
}

/// A header block being collected across HEADERS and CONTINUATION frames.
struct HeaderBlock {
    stream_id: [u8; 4],
    end_stream: bool,
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
}

impl Default for Rewriter {
    fn default() -> Self {
        Self::new()
    }
}

impl Rewriter {
    /// A rewriter at the start of a connection (the client preface comes first).
    pub fn new() -> Self {
        let mut decoder = Decoder::new();
        decoder.set_max_allowed_table_size(MAX_DYNAMIC_TABLE);
        Rewriter {
            decoder,
            preface_left: PREFACE_LEN,
            passthrough_left: 0,
            frame: Vec::new(),
            block: None,
            replaced: 0,
        }
    }

    /// How many authorities were replaced so far.
    pub fn replaced(&self) -> u64 {
        self.replaced
    }

    /// Takes the next bytes from the client and appends what the server should read to `out`.
    /// Bytes of an incomplete header-block frame are kept until the rest arrives.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), RewriteError> {
        while !input.is_empty() {
            if self.preface_left > 0 || self.passthrough_left > 0 {
                let left = if self.preface_left > 0 {
                    &mut self.preface_left
                } else {
                    &mut self.passthrough_left
                };
                let n = (*left).min(input.len());
                out.extend_from_slice(&input[..n]);
                *left -= n;
                input = &input[n..];
                continue;
            }
            if self.frame.len() < FRAME_HEADER_LEN {
                let n = (FRAME_HEADER_LEN - self.frame.len()).min(input.len());
                self.frame.extend_from_slice(&input[..n]);
                input = &input[n..];
                if self.frame.len() == FRAME_HEADER_LEN {
                    self.frame_header(out)?;
                }
                continue;
            }
            let need = FRAME_HEADER_LEN + payload_len(&self.frame);
            let n = (need - self.frame.len()).min(input.len());
            self.frame.extend_from_slice(&input[..n]);
            input = &input[n..];
            if self.frame.len() == need {
                self.header_block_frame(out)?;
            }
        }
        Ok(())
    }

    /// A frame header is complete: pass other frames through, keep collecting header blocks.
    fn frame_header(&mut self, out: &mut Vec<u8>) -> Result<(), RewriteError> {
        let len = payload_len(&self.frame);
        let kind = self.frame[3];
        if kind == HEADERS || kind == CONTINUATION {
            let held = self.block.as_ref().map_or(0, |b| b.fragment.len());
            if held + len > MAX_HEADER_BLOCK {
                return Err(RewriteError::HeaderBlockTooLarge);
            }
            if len == 0 {
                // Nothing more to collect.
                self.header_block_frame(out)?;
            }
            return Ok(());
        }
        if self.block.is_some() {
            return Err(RewriteError::InterruptedHeaderBlock(kind));
        }
        out.extend_from_slice(&self.frame);
        self.frame.clear();
        self.passthrough_left = len;
        Ok(())
    }

    /// A HEADERS or CONTINUATION frame is complete.
    fn header_block_frame(&mut self, out: &mut Vec<u8>) -> Result<(), RewriteError> {
        let kind = self.frame[3];
        let flags = self.frame[4];
        let stream_id: [u8; 4] = [self.frame[5], self.frame[6], self.frame[7], self.frame[8]];
        let payload = &self.frame[FRAME_HEADER_LEN..];
        if kind == HEADERS {
            if self.block.is_some() {
                return Err(RewriteError::InterruptedHeaderBlock(kind));
            }
            let (priority, fragment) = split_headers_payload(flags, payload)?;
            self.block = Some(HeaderBlock {
                stream_id,
                end_stream: flags & FLAG_END_STREAM != 0,
                priority,
                fragment: fragment.to_vec(),
            });
        } else {
            match self.block.as_mut() {
                Some(block) if block.stream_id == stream_id => {
                    block.fragment.extend_from_slice(payload)
                }
                Some(_) => return Err(RewriteError::InterruptedHeaderBlock(kind)),
                None => return Err(RewriteError::StrayContinuation),
            }
        }
        self.frame.clear();
        if flags & FLAG_END_HEADERS != 0 {
            if let Some(block) = self.block.take() {
                self.rewrite(&block, out)?;
            }
        }
        Ok(())
    }

    /// Decodes a whole header block and writes it again as HEADERS (+ CONTINUATION) frames.
    fn rewrite(&mut self, block: &HeaderBlock, out: &mut Vec<u8>) -> Result<(), RewriteError> {
        let mut encoded = Vec::with_capacity(block.fragment.len() * 2);
        let mut replaced = false;
        self.decoder
            .decode_with_cb(&block.fragment, |name, value| {
                let value: &[u8] =
                    if &*name == b":authority" && Authority::try_from(&*value).is_err() {
                        replaced = true;
                        UNIX_AUTHORITY.as_bytes()
                    } else {
                        &value
                    };
                encode_literal(&name, value, &mut encoded);
            })
            .map_err(|e| RewriteError::Hpack(e.to_string()))?;
        if replaced {
            self.replaced += 1;
            tracing::debug!(
                "a client on a unix socket sent an :authority HTTP/2 refuses; replaced by {UNIX_AUTHORITY}"
            );
        }
        write_header_frames(block, &encoded, out);
        Ok(())
    }
}

/// The 24-bit payload length of a frame header.
fn payload_len(header: &[u8]) -> usize {
    (usize::from(header[0]) << 16) | (usize::from(header[1]) << 8) | usize::from(header[2])
}

/// A HEADERS payload without its padding: the priority fields, if any, and the block fragment.
fn split_headers_payload(
    flags: u8,
    payload: &[u8],
) -> Result<(Option<[u8; 5]>, &[u8]), RewriteError> {
    let mut rest = payload;
    if flags & FLAG_PADDED != 0 {
        let (&pad, tail) = rest.split_first().ok_or(RewriteError::MalformedHeaders)?;
        let keep = tail
            .len()
            .checked_sub(usize::from(pad))
            .ok_or(RewriteError::MalformedHeaders)?;
        rest = &tail[..keep];
    }
    let mut priority = None;
    if flags & FLAG_PRIORITY != 0 {
        let (fields, tail) = rest
            .split_first_chunk::<5>()
            .ok_or(RewriteError::MalformedHeaders)?;
        priority = Some(*fields);
        rest = tail;
    }
    Ok((priority, rest))
}

/// One header as a "literal header field without indexing — new name" (RFC 7541 §6.2.2),
/// strings without Huffman coding.
fn encode_literal(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.push(0x00);
    for s in [name, value] {
        // Writing to a Vec cannot fail.
        let _ = encode_integer_into(s.len(), 7, 0, out);
        out.extend_from_slice(s);
    }
}

/// `encoded` as a HEADERS frame and as many CONTINUATION frames as it needs.
fn write_header_frames(block: &HeaderBlock, encoded: &[u8], out: &mut Vec<u8>) {
    let priority: &[u8] = block.priority.as_ref().map_or(&[], |p| p.as_slice());
    let first_room = MAX_FRAME_PAYLOAD - priority.len();
    let (first, mut rest) = encoded.split_at(first_room.min(encoded.len()));
    let mut flags = 0;
    if block.end_stream {
        flags |= FLAG_END_STREAM;
    }
    if block.priority.is_some() {
        flags |= FLAG_PRIORITY;
    }
    if rest.is_empty() {
        flags |= FLAG_END_HEADERS;
    }
    push_frame(out, HEADERS, flags, block.stream_id, &[priority, first]);
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(MAX_FRAME_PAYLOAD.min(rest.len()));
        rest = tail;
        let flags = if rest.is_empty() { FLAG_END_HEADERS } else { 0 };
        push_frame(out, CONTINUATION, flags, block.stream_id, &[chunk]);
    }
}

fn push_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream_id: [u8; 4], parts: &[&[u8]]) {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
    out.extend_from_slice(&stream_id);
    for part in parts {
        out.extend_from_slice(part);
    }
}

#[cfg(test)]
#[path = "authority_tests.rs"]
mod tests;
