//! [`FdStream`]: a tokio unix stream read with `recvmsg` (collecting `SCM_RIGHTS` fds) and
//! written with `sendmsg` when fds are queued.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{ready, Context, Poll};

use nix::fcntl::{open, OFlag};
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags, UnixAddr};
use nix::sys::stat::Mode;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::UnixStream;

use crate::inode::InodeKey;

/// The most fds one connection may have received and not yet handed over: more are closed
/// on arrival (and logged), so that a client cannot exhaust Quiver's descriptors.
pub const MAX_RECEIVED_FDS: usize = 256;
/// The most fds sent with one byte (the kernel's limit, `SCM_MAX_FD`, is 253).
const FDS_PER_MESSAGE: usize = 64;

/// The fds received on one connection, by the identity of their file. Cheap to clone (shared).
#[derive(Clone, Default)]
pub struct ReceivedFds(Arc<Mutex<HashMap<InodeKey, OwnedFd>>>);

impl ReceivedFds {
    fn map(&self) -> MutexGuard<'_, HashMap<InodeKey, OwnedFd>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Files `fds` under their (st_dev, st_ino); one already there for the same file is
    /// replaced (and closed). Fds past [`MAX_RECEIVED_FDS`], or that cannot be `fstat`ed, are
    /// closed.
    pub fn insert(&self, fds: Vec<OwnedFd>) {
        let mut map = self.map();
        for fd in fds {
            match InodeKey::of(&fd) {
                Ok(key) if map.len() < MAX_RECEIVED_FDS || map.contains_key(&key) => {
                    tracing::debug!(%key, "received a file descriptor");
                    map.insert(key, fd);
                }
                Ok(key) => tracing::warn!(
                    %key,
                    "closed a file descriptor passed beyond the {MAX_RECEIVED_FDS} a connection \
                     may hold"
                ),
                Err(e) => tracing::warn!(error = %e, "closed a passed fd that fstat refuses"),
            }
        }
    }

    /// A duplicate (close-on-exec) of the fd received for `key`, if one was.
    pub fn dup(&self, key: InodeKey) -> Option<io::Result<OwnedFd>> {
        self.map().get(&key).map(|fd| fd.try_clone())
    }

    /// Takes the fd received for `key` out of the table (the connection no longer holds it).
    pub fn take(&self, key: InodeKey) -> Option<OwnedFd> {
        self.map().remove(&key)
    }

    /// The identities of the fds held.
    pub fn keys(&self) -> Vec<InodeKey> {
        let mut keys: Vec<_> = self.map().keys().copied().collect();
        keys.sort();
        keys
    }

    /// How many fds are held.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// True if no fd is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A handle that tells this table from others without keeping it (or its fds) alive.
    pub fn downgrade(&self) -> ReceivedFdsRef {
        ReceivedFdsRef(Arc::downgrade(&self.0))
    }

    /// Whether `other` is a handle on this table.
    pub fn is(&self, other: &ReceivedFdsRef) -> bool {
        std::ptr::eq(Arc::as_ptr(&self.0), other.0.as_ptr())
    }
}

/// A [`ReceivedFds`] table's identity, from [`ReceivedFds::downgrade`]: it does not keep the
/// table alive (nor is its address reused while the handle lives).
#[derive(Clone, Debug, Default)]
pub struct ReceivedFdsRef(Weak<Mutex<HashMap<InodeKey, OwnedFd>>>);

impl fmt::Debug for ReceivedFds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.keys()).finish()
    }
}

/// Fds waiting to be sent on a client's connection(s): each goes with the next byte written.
/// Cheap to clone (shared by every connection of a channel).
#[derive(Clone, Default)]
pub struct FdSender(Arc<Mutex<Vec<OwnedFd>>>);

impl FdSender {
    fn queue(&self) -> MutexGuard<'_, Vec<OwnedFd>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `fd` and returns the `inode://` URL the receiver will know it by.
    pub fn send_fd(&self, fd: OwnedFd) -> io::Result<InodeKey> {
        let key = InodeKey::of(&fd)?;
        self.queue().push(fd);
        Ok(key)
    }

    /// Opens `path` (`O_PATH`: any file, a socket or a namespace included), queues the fd and
    /// returns its `inode://` URL.
    pub fn send_file(&self, path: &Path) -> io::Result<InodeKey> {
        let fd = open(path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(|e| io::Error::new(io::Error::from(e).kind(), format!("{path:?}: {e}")))?;
        self.send_fd(fd)
    }

    /// Rewrites every `file:///path` value of `params` to the `inode://dev/ino` of the file
    /// and queues its fd (as NSM's sendfd does). Values of other schemes are left alone.
    pub fn rewrite_file_urls(&self, params: &mut HashMap<String, String>) -> io::Result<()> {
        for value in params.values_mut() {
            if let Some(path) = value.strip_prefix("file://").filter(|p| p.starts_with('/')) {
                *value = self.send_file(Path::new(path))?.to_string();
            }
        }
        Ok(())
    }

    /// How many fds wait to be sent.
    pub fn pending(&self) -> usize {
        self.queue().len()
    }

    fn take_batch(&self) -> Vec<OwnedFd> {
        let mut q = self.queue();
        let n = q.len().min(FDS_PER_MESSAGE);
        q.drain(..n).collect()
    }

    fn put_back(&self, fds: Vec<OwnedFd>) {
        let mut q = self.queue();
        let rest = std::mem::replace(&mut *q, fds);
        q.extend(rest);
    }
}

impl fmt::Debug for FdSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FdSender({} pending)", self.pending())
    }
}

/// A unix stream that collects the fds passed with what it reads (into [`Self::received`])
/// and passes the fds queued in its [`FdSender`] with what it writes.
pub struct FdStream {
    io: UnixStream,
    received: ReceivedFds,
    sender: FdSender,
}

impl FdStream {
    /// Wraps `io` with an empty table of received fds and nothing to send.
    pub fn new(io: UnixStream) -> FdStream {
        FdStream::with_sender(io, FdSender::default())
    }

    /// Wraps `io`; its writes carry the fds queued in `sender`.
    pub fn with_sender(io: UnixStream, sender: FdSender) -> FdStream {
        FdStream::with_tables(io, sender, ReceivedFds::default())
    }

    /// Wraps `io`; its writes carry the fds queued in `sender`, the fds it receives go to
    /// `received` (a table shared by every connection of a client's channel, say).
    pub fn with_tables(io: UnixStream, sender: FdSender, received: ReceivedFds) -> FdStream {
        FdStream {
            io,
            received,
            sender,
        }
    }

    /// The fds received so far.
    pub fn received(&self) -> &ReceivedFds {
        &self.received
    }

    /// The queue whose fds go with this stream's writes.
    pub fn sender(&self) -> &FdSender {
        &self.sender
    }
}

/// One `recvmsg` into `buf`: the bytes read and the fds that came with them.
fn recv_with_fds(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut cmsg = nix::cmsg_space!([RawFd; FDS_PER_MESSAGE]);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<UnixAddr>(
        fd,
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT,
    )?;
    let mut fds = Vec::new();
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            // SAFETY: the kernel has just installed these descriptors in our table for this
            // message; nothing else knows them, so each is owned exactly once from here on.
            fds.extend(raw.into_iter().map(|r| unsafe { OwnedFd::from_raw_fd(r) }));
        }
    }
    if msg.flags.contains(MsgFlags::MSG_CTRUNC) {
        tracing::warn!("a peer passed more fds with one byte than Quiver takes: the rest are lost");
    }
    Ok((msg.bytes, fds))
}

impl AsyncRead for FdStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            ready!(this.io.poll_read_ready(cx))?;
            let fd = this.io.as_raw_fd();
            let unfilled = buf.initialize_unfilled();
            match this
                .io
                .try_io(Interest::READABLE, || recv_with_fds(fd, unfilled))
            {
                Ok((n, fds)) => {
                    if !fds.is_empty() {
                        this.received.insert(fds);
                    }
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for FdStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if data.is_empty() || this.sender.pending() == 0 {
            return Pin::new(&mut this.io).poll_write(cx, data);
        }
        loop {
            ready!(this.io.poll_write_ready(cx))?;
            let fds = this.sender.take_batch();
            if fds.is_empty() {
                return Pin::new(&mut this.io).poll_write(cx, data);
            }
            let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
            let sock = this.io.as_raw_fd();
            let sent = this.io.try_io(Interest::WRITABLE, || {
                sendmsg::<()>(
                    sock,
                    &[IoSlice::new(&data[..1])],
                    &[ControlMessage::ScmRights(&raw)],
                    MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
                    None,
                )
                .map_err(io::Error::from)
            });
            match sent {
                // The peer has its own copies now: ours close as `fds` drops.
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => this.sender.put_back(fds),
                Err(e) => {
                    this.sender.put_back(fds);
                    return Poll::Ready(Err(e));
                }
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.sender.pending() == 0 {
            return Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        }
        // Fds to send: they go with the first byte of the first non-empty slice.
        let first = bufs
            .iter()
            .find(|b| !b.is_empty())
            .map_or(&[][..], |b| &b[..]);
        Pin::new(this).poll_write(cx, first)
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
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// How many of our fds refer to the file `key` (other tests run beside: count only ours).
    fn fds_of(key: InodeKey) -> usize {
        use std::os::unix::fs::MetadataExt;
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::metadata(e.ok()?.path()).ok())
            .filter(|m| m.dev() == key.dev && m.ino() == key.ino)
            .count()
    }

    #[tokio::test]
    async fn fds_travel_with_the_bytes_and_are_keyed_by_inode() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut client = FdStream::new(a);
        let mut server = FdStream::new(b);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let want = InodeKey::of(std::fs::File::open(&file).unwrap()).unwrap();

        let mut params = HashMap::from([
            ("inodeURL".to_string(), format!("file://{}", file.display())),
            ("name".to_string(), "eth0".to_string()),
        ]);
        client.sender().rewrite_file_urls(&mut params).unwrap();
        assert_eq!(params["inodeURL"], want.to_string());
        assert_eq!(params["name"], "eth0");
        assert_eq!(client.sender().pending(), 1);

        client.write_all(b"hello").await.unwrap();
        assert_eq!(client.sender().pending(), 0, "sent with the first byte");
        let mut got = [0u8; 5];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello", "the bytes are intact");
        assert_eq!(server.received().keys(), vec![want]);
        let dup = server.received().dup(want).unwrap().unwrap();
        assert_eq!(InodeKey::of(&dup).unwrap(), want);
        assert!(server.received().dup(InodeKey { dev: 1, ino: 2 }).is_none());
    }

    #[tokio::test]
    async fn vectored_writes_carry_queued_fds_too() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut client = FdStream::new(a);
        let mut server = FdStream::new(b);
        let key = client
            .sender()
            .send_file(Path::new("/proc/self/ns/net"))
            .unwrap();
        let bufs = [IoSlice::new(b""), IoSlice::new(b"ab"), IoSlice::new(b"cd")];
        let mut sent = 0;
        while sent < 4 {
            let rest: Vec<IoSlice<'_>> = {
                let flat = b"abcd";
                vec![IoSlice::new(&flat[sent..])]
            };
            let n = if sent == 0 {
                client.write_vectored(&bufs).await.unwrap()
            } else {
                client.write_vectored(&rest).await.unwrap()
            };
            sent += n;
        }
        let mut got = [0u8; 4];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"abcd");
        assert_eq!(server.received().keys(), vec![key]);
    }

    #[tokio::test]
    async fn received_fds_close_with_the_stream() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut client = FdStream::new(a);
        let mut server = FdStream::new(b);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let key = client.sender().send_file(&file).unwrap();
        assert_eq!(fds_of(key), 1, "queued");
        client.write_all(b"x").await.unwrap();
        assert_eq!(
            fds_of(key),
            0,
            "in flight (in the socket): the sender's copy is closed"
        );
        let mut got = [0u8; 1];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(server.received().len(), 1);
        assert_eq!(fds_of(key), 1, "the received fd is open");
        drop(server);
        assert_eq!(fds_of(key), 0, "and closed with its connection");
        drop(client);
    }

    #[tokio::test]
    async fn a_flood_of_fds_is_capped() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut client = FdStream::new(a);
        let mut server = FdStream::new(b);
        let dir = tempfile::tempdir().unwrap();
        for i in 0..MAX_RECEIVED_FDS + 10 {
            let f = dir.path().join(i.to_string());
            std::fs::write(&f, b"").unwrap();
            client.sender().send_file(&f).unwrap();
        }
        let n = MAX_RECEIVED_FDS + 10;
        let data = vec![7u8; n];
        client.write_all(&data).await.unwrap();
        let mut got = vec![0u8; n];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(got, data);
        assert_eq!(server.received().len(), MAX_RECEIVED_FDS);
    }
}
